package mototest

import (
	"strconv"
	"strings"
)

// AWSControllerInstance returns the id and attributes of the Cloud Map
// instance that the AWS Cloud Map MCS controller registers for one ready or
// not ready IPv4 or IPv6 endpoint of an exported ClusterSetIP Service with
// one TCP port "http" (service port 80, endpoint port port), exported at
// created (Unix milliseconds, as a string): what mcsd's interoperability
// must read, written as that controller writes it.
func AWSControllerInstance(cluster, clusterSet, ip string, port int, ready bool, created string) (string, map[string]string) {
	id := "tcp-" + strings.NewReplacer(".", "_", ":", "_").Replace(ip) + "-" + strconv.Itoa(port)
	ipAttr := "AWS_INSTANCE_IPV4"
	if strings.Contains(ip, ":") {
		ipAttr = "AWS_INSTANCE_IPV6"
	}
	return id, map[string]string{
		ipAttr:                              ip,
		"AWS_INSTANCE_PORT":                 strconv.Itoa(port),
		"ENDPOINT_PORT_NAME":                "http",
		"ENDPOINT_PROTOCOL":                 "TCP",
		"SERVICE_PORT_NAME":                 "http",
		"SERVICE_PORT":                      "80",
		"SERVICE_TARGET_PORT":               strconv.Itoa(port),
		"SERVICE_PROTOCOL":                  "TCP",
		"SERVICE_TYPE":                      "ClusterSetIP",
		"CLUSTER_ID":                        cluster,
		"CLUSTERSET_ID":                     clusterSet,
		"SERVICE_EXPORT_CREATION_TIMESTAMP": created,
		"READY":                             strconv.FormatBool(ready),
		"HOSTNAME":                          "",
		"NODENAME":                          "ip-10-10-77-143.ap-southeast-2.compute.internal",
		"K8S_CONTROLLER":                    "aws-cloud-map-mcs-controller-for-k8s d07e680 (d07e680)",
	}
}
