// Command crilifecycle drives a CRI runtime the way a kubelet does over a pod's life, with the kubelet's own CRI
// client library (k8s.io/cri-client), and prints every step's answer as one JSON document, normalised (IDs, names,
// times, pids and counters replaced by placeholders) so that two runs, one against the runtime directly and one
// through a proxy, compare with ==.
//
//	crilifecycle -endpoint unix:///run/containerd/containerd.sock -image localhost/runtimeproxy/busybox:1.0 \
//	    -log-dir /tmp/pod-logs [-streaming] [-pull-policy IfNotPresent] [-output FILE]
//
// The sequence: Version, Status, RuntimeConfig, ImageFsInfo, ImageStatus, PullImage (by the pull policy),
// ListImages, RunPodSandbox (host network), PodSandboxStatus, CreateContainer (its env holds one value that is not
// UTF-8, unless -binary-env=false), StartContainer, ContainerStatus (verbose: the OCI spec's env), ExecSync, the
// filtered List calls (with -streaming the client tries the Stream* calls first and falls back on UNIMPLEMENTED),
// ContainerStats, PodSandboxStats, UpdateContainerResources,
// StopContainer, RemoveContainer, StopPodSandbox, RemovePodSandbox. A failed call is recorded and the sequence goes
// on; the pod is removed whatever happens. Each step also lists the gRPC calls the client made on the wire
// (from its OpenTelemetry client spans), so a fallback from a Stream* call shows.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

// The exit status when the driver cannot run at all (bad flags, no connection); otherwise it exits 0 with the
// document written, failed calls included.
const usageError = 2

type options struct {
	endpoint      string
	imageEndpoint string
	image         string
	streaming     bool
	binaryEnv     bool
	pullPolicy    string
	podName       string
	podUID        string
	namespace     string
	logDir        string
	cgroupParent  string
	timeout       time.Duration
	output        string
}

func parseFlags(args []string) (options, error) {
	var o options
	flags := flag.NewFlagSet("crilifecycle", flag.ContinueOnError)
	flags.StringVar(&o.endpoint, "endpoint", "", "the CRI runtime endpoint (unix:///path or a socket path)")
	flags.StringVar(&o.imageEndpoint, "image-endpoint", "", "the CRI image endpoint (default: -endpoint)")
	flags.StringVar(&o.image, "image", "", "the container's image (local: see -pull-policy)")
	flags.BoolVar(&o.streaming, "streaming", false, "the client's streaming list calls (falls back on UNIMPLEMENTED)")
	flags.BoolVar(&o.binaryEnv, "binary-env", true, "give the container the env value that is not UTF-8")
	flags.StringVar(&o.pullPolicy, "pull-policy", "IfNotPresent", "Always, IfNotPresent or Never, as a pod's imagePullPolicy")
	flags.StringVar(&o.podName, "pod-name", "crilifecycle", "the pod's name (replaced by <pod-name> in the answers)")
	flags.StringVar(&o.podUID, "pod-uid", "", "the pod's uid (default: derived from -pod-name)")
	flags.StringVar(&o.namespace, "namespace", "default", "the pod's namespace")
	flags.StringVar(&o.logDir, "log-dir", "", "the pod's log directory (created if missing)")
	flags.StringVar(&o.cgroupParent, "cgroup-parent", "/runtimeproxy-kubelet", "the pod's cgroup parent (cgroupfs)")
	flags.DurationVar(&o.timeout, "timeout", 2*time.Minute, "the client's request timeout (the kubelet's default)")
	flags.StringVar(&o.output, "output", "-", "where the JSON document goes (- for stdout)")
	if err := flags.Parse(args); err != nil {
		return o, err
	}
	if o.endpoint == "" || o.image == "" || o.logDir == "" {
		return o, fmt.Errorf("-endpoint, -image and -log-dir are required")
	}
	if o.imageEndpoint == "" {
		o.imageEndpoint = o.endpoint
	}
	if o.podUID == "" {
		o.podUID = "uid-" + o.podName
	}
	switch o.pullPolicy {
	case "Always", "IfNotPresent", "Never":
	default:
		return o, fmt.Errorf("-pull-policy %q: want Always, IfNotPresent or Never", o.pullPolicy)
	}
	return o, nil
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "crilifecycle:", err)
		os.Exit(usageError)
	}
	if err := os.MkdirAll(o.logDir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "crilifecycle:", err)
		os.Exit(usageError)
	}
	document, err := run(context.Background(), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "crilifecycle:", err)
		os.Exit(usageError)
	}
	if err := write(o.output, document); err != nil {
		fmt.Fprintln(os.Stderr, "crilifecycle:", err)
		os.Exit(usageError)
	}
}

func write(path string, document any) error {
	var out io.Writer = os.Stdout
	if path != "-" {
		file, err := os.Create(path)
		if err != nil {
			return err
		}
		defer file.Close()
		out = file
	}
	encoder := json.NewEncoder(out)
	encoder.SetIndent("", "  ")
	return encoder.Encode(document)
}
