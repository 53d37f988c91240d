// Command kustomize builds a kustomization with the kustomize API that go.mod
// pins and prints the result as YAML, in kubectl kustomize's order, for make
// manifests-render:
//
//	go run ./hack/kustomize config/overlays/etcd
package main
