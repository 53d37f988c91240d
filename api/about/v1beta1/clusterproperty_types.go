package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

// GroupVersion is the API group and version of this package.
var GroupVersion = schema.GroupVersion{Group: "about.k8s.io", Version: "v1beta1"}

var (
	// SchemeBuilder registers this package's types.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}
	// AddToScheme adds this package's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Well-known ClusterProperty names (KEP-2149).
const (
	// ClusterIDName is the property that holds this cluster's id.
	ClusterIDName = "cluster.clusterset.k8s.io"
	// ClusterSetIDName is the property that holds the clusterset's id.
	ClusterSetIDName = "clusterset.k8s.io"
)

// ClusterProperty is a property of the cluster it is stored in.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster
// +kubebuilder:metadata:annotations="api-approved.kubernetes.io=https://github.com/kubernetes/enhancements/tree/master/keps/sig-multicluster/2149-clusterid"
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Value",type=string,JSONPath=".spec.value"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
// +kubebuilder:validation:XValidation:rule="!(self.metadata.name in ['cluster.clusterset.k8s.io', 'clusterset.k8s.io']) || (size(self.spec.value) <= 128 && self.spec.value.matches('^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?([.][a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$'))",message="the value of cluster.clusterset.k8s.io and clusterset.k8s.io must be a DNS subdomain (lower-case letters, digits, '-' and '.', starting and ending with a letter or digit) of at most 128 characters"
// +kubebuilder:validation:XValidation:rule="!(self.metadata.name in ['cluster.clusterset.k8s.io', 'clusterset.k8s.io']) || self.spec.value == oldSelf.spec.value",message="the value of cluster.clusterset.k8s.io and clusterset.k8s.io cannot be changed while the cluster is a member; delete the property and create it again"
type ClusterProperty struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ClusterPropertySpec `json:"spec"`
}

// ClusterPropertySpec holds the property's value.
type ClusterPropertySpec struct {
	// Value is the property's value.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128000
	Value string `json:"value"`
}

// ClusterPropertyList is a list of ClusterProperty.
//
// +kubebuilder:object:root=true
type ClusterPropertyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterProperty `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ClusterProperty{}, &ClusterPropertyList{})
}
