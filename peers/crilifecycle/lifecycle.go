package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
	utilexec "k8s.io/utils/exec"
)

// The CRI version string the kubelet sends in VersionRequest.
const kubeRuntimeAPIVersion = "0.1.0"

// step is one call of the sequence: its answer (plain JSON data) or its error, and the gRPC calls it made.
type step struct {
	Step   string     `json:"step"`
	Label  string     `json:"label,omitempty"`
	Answer any        `json:"answer,omitempty"`
	Error  *callError `json:"error,omitempty"`
	Wire   []wireCall `json:"wire"`
}

type callError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// document is what the driver prints.
type document struct {
	Client    string            `json:"client"`
	Streaming bool              `json:"streaming"`
	Steps     []step            `json:"steps"`
	BinaryEnv map[string]string `json:"binary_env"`
}

type driver struct {
	o          options
	wire       *wireLog
	runtime    internalapi.RuntimeService
	images     internalapi.ImageManagerService
	steps      []step
	tokens     map[string]string // what this run chose or was given -> its placeholder
	podID      string
	podRemoved bool
	binaryEnv  map[string]string
	listers    []internalapi.RuntimeService // the streaming list steps' own clients, closed at the end
}

func run(ctx context.Context, o options) (*document, error) {
	d := &driver{o: o, wire: newWireLog(), binaryEnv: map[string]string{},
		tokens: map[string]string{o.podName: "<pod-name>", o.podUID: "<pod-uid>", o.logDir: "<log-dir>"}}
	if o.binaryEnv {
		d.binaryEnv["sent_hex"] = hex.EncodeToString(binaryEnvValue)
	}
	var err error
	if d.runtime, err = d.runtimeClient(ctx, o.streaming); err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", o.endpoint, err)
	}
	defer d.runtime.Close(ctx)
	if d.images, err = remote.NewRemoteImageService(ctx, o.imageEndpoint, o.timeout, d.wire.provider, o.streaming); err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", o.imageEndpoint, err)
	}
	defer d.images.Close(ctx)
	defer d.closeListers(ctx)
	d.record(nil, nil)("Connect", "runtime and image clients")
	defer d.cleanUp(ctx)
	d.lifecycle(ctx)
	return &document{Client: clientVersion(), Streaming: o.streaming, Steps: d.normalizedSteps(),
		BinaryEnv: d.binaryEnv}, nil
}

func (d *driver) runtimeClient(ctx context.Context, streaming bool) (internalapi.RuntimeService, error) {
	return remote.NewRemoteRuntimeService(ctx, d.o.endpoint, d.o.timeout, d.wire.provider, streaming)
}

// lifecycle is the sequence: what a kubelet sends from its start to a pod's removal.
func (d *driver) lifecycle(ctx context.Context) {
	d.record(answerOf(d.runtime.Version(ctx, kubeRuntimeAPIVersion)))("Version", "")
	d.record(answerOf(d.runtime.Status(ctx, false)))("Status", "")
	d.record(answerOf(d.runtime.RuntimeConfig(ctx)))("RuntimeConfig", "the cgroup driver")
	d.record(answerOf(d.images.ImageFsInfo(ctx)))("ImageFsInfo", "")
	imageID := d.ensureImage(ctx)
	d.record(listOf(d.images.ListImages(ctx, &runtimeapi.ImageFilter{Image: &runtimeapi.ImageSpec{Image: d.o.image}})))(
		"ListImages", "by image")

	podConfig := podSandboxConfig(d.o)
	podID, err := d.runtime.RunPodSandbox(ctx, podConfig, "")
	d.remember(podID, "<pod-id>")
	d.podID = podID
	d.record(map[string]any{"pod_sandbox_id": podID}, err)("RunPodSandbox", "host network")
	if err != nil {
		return
	}
	podStatus, err := d.runtime.PodSandboxStatus(ctx, podID, true)
	d.rememberPid(podStatus.GetInfo(), "<pod-pid>")
	d.record(podStatus, err)("PodSandboxStatus", "ready, verbose")

	containerID, err := d.runtime.CreateContainer(ctx, podID, containerConfig(d.o, imageID), podConfig)
	d.remember(containerID, "<container-id>")
	d.record(map[string]any{"container_id": containerID}, err)("CreateContainer", "")
	if err == nil {
		d.runContainer(ctx, containerID)
	}
	d.lists(ctx, "after the container")
	if err == nil {
		d.record(nil, d.runtime.RemoveContainer(ctx, containerID))("RemoveContainer", "")
	}
	d.record(nil, d.runtime.StopPodSandbox(ctx, podID))("StopPodSandbox", "")
	d.record(answerOf(d.runtime.PodSandboxStatus(ctx, podID, false)))("PodSandboxStatus", "not ready")
	err = d.runtime.RemovePodSandbox(ctx, podID)
	d.podRemoved = err == nil
	d.record(nil, err)("RemovePodSandbox", "")
	d.record(listOf(d.lister(ctx).ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{Id: podID})))(
		"ListPodSandbox", "by id, removed")
}

// ensureImage is the kubelet's image manager: ImageStatus, then PullImage as the pull policy says. It returns
// the image ID the container is created with (the kubelet's imageRef), or the user's reference if there is none.
func (d *driver) ensureImage(ctx context.Context) string {
	spec := &runtimeapi.ImageSpec{Image: d.o.image}
	imageStatus, err := d.images.ImageStatus(ctx, spec, false)
	d.record(imageStatus, err)("ImageStatus", "before the pod")
	present := err == nil && imageStatus.GetImage() != nil
	switch {
	case d.o.pullPolicy == "Always" || (!present && d.o.pullPolicy == "IfNotPresent"):
		ref, err := d.images.PullImage(ctx, spec, nil, podSandboxConfig(d.o))
		d.record(map[string]any{"image_ref": ref}, err)("PullImage", d.o.pullPolicy)
	case !present:
		d.record(nil, errors.New("ErrImageNeverPull: the image is absent and the pull policy is Never"))(
			"PullImage", d.o.pullPolicy)
	default:
		d.record(map[string]any{"skipped": "the image is present"}, nil)("PullImage", d.o.pullPolicy)
	}
	if present {
		return imageStatus.GetImage().GetId()
	}
	return d.o.image
}

// runContainer starts the container, reads it, probes it, resizes it and stops it.
func (d *driver) runContainer(ctx context.Context, containerID string) {
	d.record(nil, d.runtime.StartContainer(ctx, containerID))("StartContainer", "")
	running, err := d.runtime.ContainerStatus(ctx, containerID, true)
	d.rememberPid(running.GetInfo(), "<container-pid>")
	if d.o.binaryEnv {
		d.binaryEnv["oci_spec_hex"] = specEnvHex(running.GetInfo())
	}
	d.record(running, err)("ContainerStatus", "running, verbose: the OCI spec")
	stdout, stderr, err := d.runtime.ExecSync(ctx, containerID, []string{"env"}, execTimeoutSeconds*time.Second)
	if d.o.binaryEnv {
		d.binaryEnv["in_container_hex"] = lineHex(stdout, binaryEnvKey+"=")
	}
	d.record(execAnswer(stdout, stderr, err))("ExecSync", "env")
	d.record(execAnswer(d.runtime.ExecSync(ctx, containerID, []string{"sh", "-c", "echo probe; echo failing >&2; exit 3"},
		execTimeoutSeconds*time.Second)))("ExecSync", "a failing exec probe")
	d.lists(ctx, "running")
	d.record(answerOf(d.runtime.ContainerStats(ctx, containerID)))("ContainerStats", "")
	d.record(answerOf(d.runtime.PodSandboxStats(ctx, d.podID)))("PodSandboxStats", "")
	d.record(nil, d.runtime.UpdateContainerResources(ctx, containerID, resizedResources()))(
		"UpdateContainerResources", "resize cpu and memory")
	d.record(answerOf(d.runtime.ContainerStatus(ctx, containerID, true)))("ContainerStatus", "resized, verbose")
	// The kubelet (1.33+) tells the runtime the pod's new resources after the containers' (containerd 2.2+
	// turns it into NRI's UpdatePodSandbox; before 2.2 it answers UNIMPLEMENTED, which the kubelet ignores).
	d.record(answerOf(d.runtime.UpdatePodSandboxResources(ctx, &runtimeapi.UpdatePodSandboxResourcesRequest{
		PodSandboxId: d.podID, Resources: resizedResources().Linux})))("UpdatePodSandboxResources", "the pod's resize")
	d.record(nil, d.runtime.StopContainer(ctx, containerID, stopGraceSeconds))("StopContainer", "")
	d.record(answerOf(d.runtime.ContainerStatus(ctx, containerID, false)))("ContainerStatus", "exited")
}

// lists are the kubelet's relists (PLEG) and its CRI stats provider, filtered to this pod.
func (d *driver) lists(ctx context.Context, when string) {
	byPod := &runtimeapi.ContainerFilter{PodSandboxId: d.podID}
	d.record(listOf(d.lister(ctx).ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{Id: d.podID})))(
		"ListPodSandbox", "by id, "+when)
	d.record(listOf(d.lister(ctx).ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{
		State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
		LabelSelector: map[string]string{"io.kubernetes.pod.uid": d.o.podUID}})))(
		"ListPodSandbox", "ready, by label, "+when)
	d.record(listOf(d.lister(ctx).ListContainers(ctx, byPod)))("ListContainers", "by pod, "+when)
	d.record(listOf(d.lister(ctx).ListContainers(ctx, &runtimeapi.ContainerFilter{
		State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{"io.kubernetes.pod.uid": d.o.podUID}})))(
		"ListContainers", "running, by label, "+when)
	d.record(listOf(d.lister(ctx).ListContainerStats(ctx, &runtimeapi.ContainerStatsFilter{PodSandboxId: d.podID})))(
		"ListContainerStats", "by pod, "+when)
	d.record(listOf(d.lister(ctx).ListPodSandboxStats(ctx, &runtimeapi.PodSandboxStatsFilter{Id: d.podID})))(
		"ListPodSandboxStats", "by id, "+when)
}

// lister is the client of one list step. Without streaming, the driver's own. With it, a new streaming client:
// one client stops trying streams after its first UNIMPLEMENTED (and falls back for good), so a client per
// step makes every Stream* call be tried, as a freshly started kubelet would.
func (d *driver) lister(ctx context.Context) internalapi.RuntimeService {
	if !d.o.streaming {
		return d.runtime
	}
	client, err := d.runtimeClient(ctx, true)
	if err != nil {
		return d.runtime
	}
	d.listers = append(d.listers, client)
	return client
}

func (d *driver) closeListers(ctx context.Context) {
	for _, client := range d.listers {
		_ = client.Close(ctx)
	}
}

// cleanUp removes the pod (and so its container) if the sequence did not: nothing is left in the runtime.
func (d *driver) cleanUp(ctx context.Context) {
	if d.podID == "" || d.podRemoved {
		return
	}
	_ = d.runtime.StopPodSandbox(ctx, d.podID)
	_ = d.runtime.RemovePodSandbox(ctx, d.podID)
}

// record returns a function that appends the step under its name and label: called as
// d.record(answer, err)(name, label), so a call's two results feed it directly.
func (d *driver) record(answer any, err error) func(name, label string) {
	return func(name, label string) {
		entry := step{Step: name, Label: label, Wire: d.wire.since()}
		if err != nil {
			entry.Error = errorOf(err)
		} else if answer != nil && !isNilMessage(answer) {
			entry.Answer = plain(answer)
		}
		d.steps = append(d.steps, entry)
	}
}

func (d *driver) remember(value, placeholder string) {
	if value != "" {
		d.tokens[value] = placeholder
	}
}

// rememberPid makes "/proc/<pid>/" (the namespaces' paths in every OCI spec) a token: the pid itself is masked
// by key, but it also appears inside those paths.
func (d *driver) rememberPid(info map[string]string, placeholder string) {
	var verbose struct {
		Pid int `json:"pid"`
	}
	if json.Unmarshal([]byte(info["info"]), &verbose) == nil && verbose.Pid > 0 {
		d.remember(fmt.Sprintf("/proc/%d/", verbose.Pid), fmt.Sprintf("/proc/%s/", placeholder))
	}
}

func (d *driver) normalizedSteps() []step {
	steps := make([]step, len(d.steps))
	for i, entry := range d.steps {
		entry.Answer = sortedItems(normalized(entry.Answer, d.tokens))
		if entry.Error != nil {
			entry.Error = &callError{Code: entry.Error.Code, Message: normalized(entry.Error.Message, d.tokens).(string)}
		}
		for j := range entry.Wire {
			entry.Wire[j].Message = normalized(entry.Wire[j].Message, d.tokens).(string)
		}
		steps[i] = entry
	}
	return steps
}

// The canonical names of gRPC's codes (Go's String() says "InvalidArgument"; the wire and Python say this).
var codeNames = map[codes.Code]string{
	codes.OK: "OK", codes.Canceled: "CANCELLED", codes.Unknown: "UNKNOWN", codes.InvalidArgument: "INVALID_ARGUMENT",
	codes.DeadlineExceeded: "DEADLINE_EXCEEDED", codes.NotFound: "NOT_FOUND", codes.AlreadyExists: "ALREADY_EXISTS",
	codes.PermissionDenied: "PERMISSION_DENIED", codes.ResourceExhausted: "RESOURCE_EXHAUSTED",
	codes.FailedPrecondition: "FAILED_PRECONDITION", codes.Aborted: "ABORTED", codes.OutOfRange: "OUT_OF_RANGE",
	codes.Unimplemented: "UNIMPLEMENTED", codes.Internal: "INTERNAL", codes.Unavailable: "UNAVAILABLE",
	codes.DataLoss: "DATA_LOSS", codes.Unauthenticated: "UNAUTHENTICATED",
}

func errorOf(err error) *callError {
	if found, ok := status.FromError(err); ok {
		return &callError{Code: codeNames[found.Code()], Message: found.Message()}
	}
	return &callError{Code: "CLIENT", Message: err.Error()}
}

func isNilMessage(answer any) bool {
	message, ok := answer.(proto.Message)
	return ok && !message.ProtoReflect().IsValid()
}

func answerOf[T any](answer T, err error) (any, error) {
	return answer, err
}

// listOf turns a list call's items into plain messages (an empty list stays a list, not nil).
func listOf[T proto.Message](items []T, err error) (any, error) {
	messages := make([]proto.Message, 0, len(items))
	for _, item := range items {
		messages = append(messages, item)
	}
	return map[string]any{"items": messages}, err
}

// execAnswer is ExecSync's answer as the kubelet sees it: output, and the exit code the client turns into an error.
func execAnswer(stdout, stderr []byte, err error) (any, error) {
	exitCode := 0
	var exited utilexec.CodeExitError
	if errors.As(err, &exited) {
		exitCode, err = exited.Code, nil
	}
	return map[string]any{"stdout": string(stdout), "stderr": string(stderr), "exit_code": exitCode}, err
}

// specEnvHex is the binary env variable's value as containerd wrote it into the OCI spec (verbose info), in hex.
func specEnvHex(info map[string]string) string {
	var verbose struct {
		RuntimeSpec struct {
			Process struct {
				Env []string `json:"env"`
			} `json:"process"`
		} `json:"runtimeSpec"`
	}
	if json.Unmarshal([]byte(info["info"]), &verbose) != nil {
		return ""
	}
	for _, variable := range verbose.RuntimeSpec.Process.Env {
		if value, found := strings.CutPrefix(variable, binaryEnvKey+"="); found {
			return hex.EncodeToString([]byte(value))
		}
	}
	return ""
}

// lineHex is the rest of the first line of output starting with prefix, in hex.
func lineHex(output []byte, prefix string) string {
	for _, line := range strings.Split(string(output), "\n") {
		if value, found := strings.CutPrefix(line, prefix); found {
			return hex.EncodeToString([]byte(value))
		}
	}
	return ""
}

// clientVersion is the cri-client module version this binary was built with.
func clientVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, module := range info.Deps {
			if module.Path == "k8s.io/cri-client" {
				return module.Path + " " + module.Version
			}
		}
	}
	return "k8s.io/cri-client"
}
