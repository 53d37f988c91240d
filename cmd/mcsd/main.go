package main

import (
	_ "go.etcd.io/etcd/client/v3"
	_ "go.etcd.io/etcd/server/v3/embed"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	_ "k8s.io/client-go/kubernetes"
	_ "sigs.k8s.io/controller-runtime"
	_ "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	_ "sigs.k8s.io/mcs-api/config/crd"
	_ "github.com/miekg/dns"
	_ "github.com/spf13/cobra"
	_ "github.com/aws/aws-sdk-go-v2/service/servicediscovery"
	_ "github.com/aws/aws-sdk-go-v2/config"
	_ "golang.org/x/time/rate"
	_ "github.com/google/go-cmp/cmp"
)

func main() {}
