package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
)

// Config is what the testbed tells the agent of its cluster. The testbed
// writes it as JSON; `testbed agent -config FILE` reads it.
type Config struct {
	// Cluster is the cluster's id (c1..cN).
	Cluster string
	// Kubeconfig reaches the API server as an administrator, at APIAddr.
	Kubeconfig string
	// APIAddr is the API server's host:port on the host's loopback.
	APIAddr string
	// StateDir holds the agent's files: pods' logs and working directories,
	// the components' configuration and logs, the ready marker.
	StateDir string
	// SocketDir holds the API relay's Unix socket (a short path).
	SocketDir string
	// NodeNetns is the cluster's node network namespace.
	NodeNetns string
	// PodNetnsPrefix starts every pod namespace's name.
	PodNetnsPrefix string
	// Nodes are the cluster's nodes.
	Nodes []Node
	// ClusterCIDRs are the cluster's pod ranges (IPv4, IPv6).
	ClusterCIDRs []string
	// DNSServiceIPs are the kube-dns Service's cluster IPs, pods' name servers.
	DNSServiceIPs []string
	// ExecAddr is where the streaming server listens (host:port on the
	// host's loopback); the nodes' Hostname address and kubelet port point
	// there.
	ExecAddr string
	// ClientCA verifies the API server's client certificate on exec requests.
	ClientCA string
	// Corefile configures the cluster's CoreDNS in the node namespace: on
	// port 53 of the first node's addresses, its ready plugin on
	// 127.0.0.1:8181.
	Corefile string
	// KubeProxy, CoreDNS and Agnhost are the programs' paths.
	KubeProxy, CoreDNS, Agnhost string
	// Images is the testbed's image store (package images): containers
	// whose image is there run from it under Runc. Empty: none.
	Images string
	// Runc is the OCI runtime's path; empty when the host has none.
	Runc string
}

// Node is one of the cluster's nodes.
type Node struct {
	Name string
	// PodCIDRs are its pod ranges (IPv4, IPv6).
	PodCIDRs []string
	// IPs are its addresses in the node namespace (IPv4, IPv6).
	IPs []string
}

// ReadyFile is the file in StateDir that the agent writes once pods can be
// run and kube-proxy and DNS serve.
const ReadyFile = "ready"

// Load reads a Config.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read agent config: %w", err)
	}
	var c Config
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("parse agent config %s: %w", path, err)
	}
	return &c, c.Validate()
}

// Validate says what is missing.
func (c *Config) Validate() error {
	var errs []error
	for name, v := range map[string]string{
		"Cluster": c.Cluster, "Kubeconfig": c.Kubeconfig, "APIAddr": c.APIAddr, "StateDir": c.StateDir,
		"SocketDir": c.SocketDir, "NodeNetns": c.NodeNetns, "PodNetnsPrefix": c.PodNetnsPrefix,
		"ExecAddr": c.ExecAddr, "ClientCA": c.ClientCA, "Corefile": c.Corefile, "KubeProxy": c.KubeProxy, "CoreDNS": c.CoreDNS, "Agnhost": c.Agnhost,
	} {
		if v == "" {
			errs = append(errs, fmt.Errorf("%s is empty", name))
		}
	}
	if len(c.Nodes) == 0 {
		errs = append(errs, errors.New("no nodes"))
	}
	for _, n := range c.Nodes {
		if len(n.PodCIDRs) == 0 || len(n.IPs) == 0 {
			errs = append(errs, fmt.Errorf("node %s has no pod ranges or addresses", n.Name))
		}
	}
	if len(c.DNSServiceIPs) == 0 {
		errs = append(errs, errors.New("no DNS service IPs"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("agent config: %w", err)
	}
	return nil
}

// Write stores the Config as JSON.
func (c *Config) Write(path string) error {
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("encode agent config: %w", err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("write agent config: %w", err)
	}
	return nil
}
