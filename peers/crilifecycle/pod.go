package main

import (
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The one env value that is not UTF-8: cri-api 0.37 sends KeyValue.value as bytes, as kubelets on cri-api
// >= 0.34.9 / 0.35.6 / 0.36.2 do. containerd writes the OCI spec as JSON, which turns each bad byte into U+FFFD.
const binaryEnvKey = "RP_BINARY_ENV"

var binaryEnvValue = []byte("fo\xff\xfeo")

const (
	containerName = "app"
	// sh traps TERM, so StopContainer returns at once instead of after its grace period.
	containerScript    = "trap 'exit 0' TERM; while true; do sleep 1; done"
	stopGraceSeconds   = 10
	execTimeoutSeconds = 10
)

// The kubelet's default masked and read-only paths (its securitycontext package) for an unprivileged container.
var (
	defaultMaskedPaths = []string{"/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys",
		"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
		"/sys/firmware", "/sys/devices/virtual/powercap"}
	defaultReadonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
)

// Host network (no CNI needed), the pod's own PID namespace per container, a shared IPC namespace: the shape
// of the project's e2e pods. No hostname: a host-network pod may not set one.
func namespaceOptions() *runtimeapi.NamespaceOption {
	return &runtimeapi.NamespaceOption{
		Network: runtimeapi.NamespaceMode_NODE,
		Pid:     runtimeapi.NamespaceMode_CONTAINER,
		Ipc:     runtimeapi.NamespaceMode_POD,
	}
}

func podLabels(o options) map[string]string {
	return map[string]string{
		"io.kubernetes.pod.name":      o.podName,
		"io.kubernetes.pod.namespace": o.namespace,
		"io.kubernetes.pod.uid":       o.podUID,
		"app":                         "crilifecycle",
	}
}

// What the kubelet's generatePodSandboxConfig builds for a host-network pod with a burstable container.
func podSandboxConfig(o options) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: o.podName, Uid: o.podUID, Namespace: o.namespace},
		LogDirectory: o.logDir,
		DnsConfig: &runtimeapi.DNSConfig{
			Servers:  []string{"10.96.0.10"},
			Searches: []string{o.namespace + ".svc.cluster.local", "svc.cluster.local", "cluster.local"},
			Options:  []string{"ndots:5"},
		},
		Labels: podLabels(o),
		Annotations: map[string]string{
			"kubernetes.io/config.source": "api",
			"kubernetes.io/config.seen":   "2026-01-01T00:00:00.000000000Z",
		},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent:    o.cgroupParent,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: namespaceOptions()},
			Resources: &runtimeapi.LinuxContainerResources{
				CpuPeriod: 100000, CpuQuota: 20000, CpuShares: 204, MemoryLimitInBytes: 64 << 20},
		},
	}
}

// What the kubelet's generateContainerConfig builds: the image by the ID ImageStatus gave, the user's reference
// beside it, env (one value not UTF-8), the kubelet's labels and annotations, resources and security context.
func containerConfig(o options, imageID string) *runtimeapi.ContainerConfig {
	labels := podLabels(o)
	delete(labels, "app")
	labels["io.kubernetes.container.name"] = containerName
	return &runtimeapi.ContainerConfig{
		Metadata:   &runtimeapi.ContainerMetadata{Name: containerName},
		Image:      &runtimeapi.ImageSpec{Image: imageID, UserSpecifiedImage: o.image},
		Command:    []string{"sh", "-c", containerScript},
		WorkingDir: "/",
		Envs:       envs(o),
		Labels:     labels,
		Annotations: map[string]string{
			"io.kubernetes.container.hash":                     "5c2d9f1e",
			"io.kubernetes.container.restartCount":             "0",
			"io.kubernetes.container.terminationMessagePath":   "/dev/termination-log",
			"io.kubernetes.container.terminationMessagePolicy": "File",
			"io.kubernetes.pod.terminationGracePeriod":         "30",
		},
		LogPath: containerName + "/0.log",
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources: &runtimeapi.LinuxContainerResources{
				CpuPeriod: 100000, CpuQuota: 20000, CpuShares: 204, MemoryLimitInBytes: 64 << 20, OomScoreAdj: 968},
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				NamespaceOptions: namespaceOptions(),
				MaskedPaths:      defaultMaskedPaths,
				ReadonlyPaths:    defaultReadonlyPaths,
			},
		},
	}
}

func envs(o options) []*runtimeapi.KeyValue {
	envs := []*runtimeapi.KeyValue{
		{Key: "KUBERNETES_SERVICE_HOST", Value: []byte("10.96.0.1")},
		{Key: "KUBERNETES_SERVICE_PORT", Value: []byte("443")},
		{Key: "POD_NAMESPACE", Value: []byte(o.namespace)},
	}
	if o.binaryEnv {
		envs = append(envs, &runtimeapi.KeyValue{Key: binaryEnvKey, Value: binaryEnvValue})
	}
	return envs
}

// A vertical resize, as the kubelet sends for an in-place pod resize.
func resizedResources() *runtimeapi.ContainerResources {
	return &runtimeapi.ContainerResources{Linux: &runtimeapi.LinuxContainerResources{
		CpuPeriod: 100000, CpuQuota: 50000, CpuShares: 512, MemoryLimitInBytes: 128 << 20, OomScoreAdj: 968}}
}
