package clusterid

import (
	"context"
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	aboutv1beta1 "github.com/mcsd-io/mcsd/api/about/v1beta1"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

func prop(name, value string) client.Object {
	return &aboutv1beta1.ClusterProperty{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: aboutv1beta1.ClusterPropertySpec{Value: value}}
}

func TestRead(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := aboutv1beta1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		objs    []client.Object
		want    registry.Identity
		wantErr error
		msg     string
	}{
		{name: "both", objs: []client.Object{prop(aboutv1beta1.ClusterIDName, "c1"), prop(aboutv1beta1.ClusterSetIDName, "set")},
			want: registry.Identity{Cluster: "c1", ClusterSet: "set"}},
		{name: "no cluster id", objs: []client.Object{prop(aboutv1beta1.ClusterSetIDName, "set")},
			wantErr: ErrMissing, msg: `ClusterProperty "cluster.clusterset.k8s.io" does not exist`},
		{name: "no clusterset id", objs: []client.Object{prop(aboutv1beta1.ClusterIDName, "c1")},
			wantErr: ErrMissing, msg: `ClusterProperty "clusterset.k8s.io" does not exist`},
		{name: "invalid", objs: []client.Object{prop(aboutv1beta1.ClusterIDName, "C_1"), prop(aboutv1beta1.ClusterSetIDName, "set")},
			wantErr: ErrInvalid, msg: `cluster id "C_1" is invalid`},
		{name: "cluster id too long for a label value", objs: []client.Object{prop(aboutv1beta1.ClusterIDName, strings.Repeat("a.", 32)+"a"), prop(aboutv1beta1.ClusterSetIDName, "set")},
			wantErr: ErrInvalid, msg: "at most 63"},
		{name: "clusterset id of 128", objs: []client.Object{prop(aboutv1beta1.ClusterIDName, "c1"), prop(aboutv1beta1.ClusterSetIDName, strings.Repeat("a.", 63)+"ab")},
			want: registry.Identity{Cluster: "c1", ClusterSet: strings.Repeat("a.", 63) + "ab"}},
		{name: "clusterset id too long", objs: []client.Object{prop(aboutv1beta1.ClusterIDName, "c1"), prop(aboutv1beta1.ClusterSetIDName, strings.Repeat("a.", 64)+"a")},
			wantErr: ErrInvalid, msg: "at most 128"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tc.objs...).Build()
			got, err := Read(context.Background(), c)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.msg) {
					t.Fatalf("err = %v, want %v containing %q", err, tc.wantErr, tc.msg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
