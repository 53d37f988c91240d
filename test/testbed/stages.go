package testbed

import "fmt"

// nodeStages are the kwok stages of a testbed with a data plane. kwok plays
// the nodes only (ready, then a heartbeat); there are no pod stages, so
// kwok leaves pods alone and the testbed's node agent runs them. The
// templates leave the nodes' addresses and kubelet port as the testbed set
// them: they point the API server's exec requests at the agent.
func nodeStages(kubeVersion string) string {
	ready := nodeStage("testbed-node-ready", `    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'NotIn'
      values: ['True']
`, fmt.Sprintf(`  next:
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
`, kubeVersion))
	heartbeat := nodeStage("testbed-node-heartbeat", `    - key: '.status.phase'
      operator: 'In'
      values: ['Running']
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'In'
      values: ['True']
`, `  delay:
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
`)
	return ready + heartbeat
}

// nodeStage is the YAML of a kwok Stage named name for the Nodes that
// matchExpressions (the selector's list items) select; rest is the rest of
// its spec (its delay and next).
func nodeStage(name, matchExpressions, rest string) string {
	return `---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: ` + name + `
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
` + matchExpressions + rest
}
