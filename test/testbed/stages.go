package testbed

import "fmt"

// nodeStages are the kwok stages of a testbed with a data plane. kwok plays
// the nodes only (ready, then a heartbeat); there are no pod stages, so
// kwok leaves pods alone and the testbed's node agent runs them. The
// templates leave the nodes' addresses and kubelet port as the testbed set
// them: they point the API server's exec requests at the agent.
func nodeStages(kubeVersion string) string {
	return fmt.Sprintf(`---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: testbed-node-ready
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'NotIn'
      values: ['True']
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      {{ range NodeConditions }}
      - lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $now | Quote }}
        message: {{ .message | Quote }}
        reason: {{ .reason | Quote }}
        status: {{ .status | Quote }}
        type: {{ .type | Quote }}
      {{ end }}
      allocatable: {cpu: "1k", memory: "1Ti", pods: "1M"}
      capacity: {cpu: "1k", memory: "1Ti", pods: "1M"}
      nodeInfo:
        architecture: amd64
        operatingSystem: linux
        kubeletVersion: %[1]s
        kubeProxyVersion: %[1]s
        containerRuntimeVersion: testbed://processes
        kernelVersion: ""
        osImage: mcsd testbed
        machineID: ""
        systemUUID: ""
        bootID: ""
      phase: Running
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: testbed-node-heartbeat
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.status.phase'
      operator: 'In'
      values: ['Running']
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'In'
      values: ['True']
  delay:
    durationMilliseconds: 20000
    jitterDurationMilliseconds: 25000
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      {{ range .status.conditions }}
      - lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ .lastTransitionTime | Quote }}
        message: {{ .message | Quote }}
        reason: {{ .reason | Quote }}
        status: {{ .status | Quote }}
        type: {{ .type | Quote }}
      {{ end }}
`, kubeVersion)
}
