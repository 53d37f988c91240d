package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// podStatus is the part of a pod's status the agent owns.
type podStatus struct {
	Phase             corev1.PodPhase          `json:"phase"`
	PodIP             string                   `json:"podIP"`
	PodIPs            []corev1.PodIP           `json:"podIPs"`
	HostIP            string                   `json:"hostIP"`
	HostIPs           []corev1.HostIP          `json:"hostIPs"`
	StartTime         *metav1.Time             `json:"startTime"`
	Conditions        []corev1.PodCondition    `json:"conditions"`
	ContainerStatuses []corev1.ContainerStatus `json:"containerStatuses"`
}

// status computes the pod's status from its running containers. Conditions
// the agent does not own (PodScheduled, say) are kept as the pod has them.
func (sb *sandbox) status(pod *corev1.Pod) podStatus {
	st := podStatus{PodIP: sb.ips[0], HostIP: sb.node.IPs[0], StartTime: &metav1.Time{Time: sb.started}}
	for _, ip := range sb.ips {
		st.PodIPs = append(st.PodIPs, corev1.PodIP{IP: ip})
	}
	for _, ip := range sb.node.IPs {
		st.HostIPs = append(st.HostIPs, corev1.HostIP{IP: ip})
	}
	ready, anyStarted, allDone, allSucceeded := true, false, true, true
	var unready []string
	var why []string
	for _, c := range sb.containers {
		cs := c.state()
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
		if !cs.Ready {
			ready = false
			unready = append(unready, c.name)
			if w := cs.State.Waiting; w != nil && w.Message != "" {
				why = append(why, fmt.Sprintf("%s: %s: %s", c.name, w.Reason, w.Message))
			}
		}
		if cs.State.Running != nil || cs.RestartCount > 0 || cs.State.Terminated != nil {
			anyStarted = true
		}
		if cs.State.Terminated == nil {
			allDone = false
		} else if cs.State.Terminated.ExitCode != 0 {
			allSucceeded = false
		}
	}
	switch {
	case allDone && allSucceeded:
		st.Phase = corev1.PodSucceeded
	case allDone:
		st.Phase = corev1.PodFailed
	case anyStarted:
		st.Phase = corev1.PodRunning
	default:
		st.Phase = corev1.PodPending
	}
	if allDone {
		ready = false
	}

	sb.mu.Lock()
	if sb.readyChange.IsZero() || ready != sb.lastReady {
		sb.readyChange, sb.lastReady = time.Now(), ready
	}
	changed := metav1.Time{Time: sb.readyChange}
	sb.mu.Unlock()

	cond := func(t corev1.PodConditionType, ok bool, reason, msg string) corev1.PodCondition {
		s := corev1.ConditionTrue
		if !ok {
			s = corev1.ConditionFalse
		}
		return corev1.PodCondition{Type: t, Status: s, Reason: reason, Message: msg, LastTransitionTime: changed}
	}
	reason, msg := "", ""
	if !ready {
		reason = "ContainersNotReady"
		msg = fmt.Sprintf("containers with unready status: [%s]", strings.Join(unready, " "))
		if len(why) > 0 {
			msg += "; " + strings.Join(why, "; ")
		}
	}
	started := metav1.Time{Time: sb.started}
	owned := []corev1.PodCondition{
		{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue, LastTransitionTime: started},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: started},
		cond(corev1.ContainersReady, ready, reason, msg),
		cond(corev1.PodReady, ready, reason, msg),
	}
	for _, c := range pod.Status.Conditions {
		switch c.Type {
		case corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady:
		default:
			st.Conditions = append(st.Conditions, c)
		}
	}
	st.Conditions = append(st.Conditions, owned...)
	return st
}

// writeStatus patches the pod's status when what the agent computes differs
// from what it wrote last. A status another writer set since (a test that
// marks a pod not ready, say) stands until the pod's containers change.
func (a *Agent) writeStatus(ctx context.Context, pod *corev1.Pod, sb *sandbox) error {
	st := sb.status(pod)
	data, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode pod status: %w", err)
	}
	sb.mu.Lock()
	same := string(data) == sb.lastWritten
	sb.mu.Unlock()
	if same {
		return nil
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": pod.UID}, // a precondition: this pod, not a successor
		"status":   st,
	})
	if err != nil {
		return fmt.Errorf("encode pod status: %w", err)
	}
	if _, err := a.cs.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("patch pod status: %w", err)
	}
	sb.mu.Lock()
	sb.lastWritten = string(data)
	sb.mu.Unlock()
	return nil
}
