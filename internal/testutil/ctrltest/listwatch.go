package ctrltest

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
)

// ListWatch is a lister-watcher for client-go's own informers and
// reflectors, with no API server: each list returns a copy of list, each
// watch a watch that reports nothing. It tells the reflector that it
// cannot stream a list through a watch (WatchListClient), so the reflector
// lists.
func ListWatch(list runtime.Object) toolscache.ListerWatcher {
	return ListWatchFunc(func(context.Context) (runtime.Object, error) { return list.DeepCopyObject(), nil })
}

// ListWatchFunc is ListWatch with each list answered by list: an error, or
// a list that returns only when ctx ends.
func ListWatchFunc(list func(ctx context.Context) (runtime.Object, error)) toolscache.ListerWatcher {
	return listOnly{&toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, _ metav1.ListOptions) (runtime.Object, error) {
			return list(ctx)
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			return watch.NewFake(), nil
		},
	}}
}

type listOnly struct{ *toolscache.ListWatch }

func (listOnly) IsWatchListSemanticsUnSupported() bool { return true }
