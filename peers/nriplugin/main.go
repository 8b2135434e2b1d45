// nriplugin is the project's own NRI plugin on NRI's real Go stub (github.com/containerd/nri/pkg/stub), used by the
// tests to prove the proxy's NRI host against the stub NRI runtimes speak. It is built twice from this one package:
// with peers/go.mod (stub v0.12) and with -modfile=nri-v0.8.mod -tags nri_v08 (stub v0.8, the NRI of containerd
// 1.7.26 to 2.1).
//
// It logs every event it receives as one JSON line (event name, pod and container names and ids, and the fields the
// tests assert on; and, under "pod_full", "container_full", "resources_full", every field of the messages as the
// api package's JSON names them, for comparisons of NRI runtimes) to -log (default stdout) and subscribes to -events (default: every event it handles). It answers
// CreateContainer with the adjustments its flags ask for (-env, -annotation, -mount, -device, -cpu-shares,
// -memory-limit) and UpdateContainer with other CPU shares for the container (-update-cpu-shares); once a container
// started, it can ask for other CPU shares on its own (-own-cpu-shares, the stub's UpdateContainers).
//
// Connected, -socket names the runtime's NRI socket (the stub's WithSocketPath). Launched from a runtime's plugin
// directory, the stub takes the inherited fd NRI_PLUGIN_SOCKET names, and the plugin's config text (Configure) is
// read as more of the same flags, e.g. "-log=/tmp/events.jsonl -env=LAUNCHED=yes".
//
// This file holds everything both stub versions share; events_v012.go adds the events only v0.10+ has.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/containerd/ttrpc"
)

// listFlag is a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// settings are the plugin's flags; the launched plugin's config text sets them too.
type settings struct {
	socket, name, idx, log, events string
	env, annotations, mounts       listFlag
	devices                        listFlag
	cpuShares, memoryLimit         int64
	updateCPUShares                int64
	ownCPUShares                   int64
}

func (s *settings) bind(fs *flag.FlagSet) {
	fs.StringVar(&s.socket, "socket", s.socket,
		"the runtime's NRI socket (default: the stub's, or NRI_PLUGIN_SOCKET's fd)")
	fs.StringVar(&s.name, "name", s.name, "plugin name (default: NRI_PLUGIN_NAME)")
	fs.StringVar(&s.idx, "idx", s.idx, "plugin index, two digits (default: NRI_PLUGIN_IDX)")
	fs.StringVar(&s.log, "log", s.log, "file the JSON event lines are appended to (default: stdout)")
	fs.StringVar(&s.events, "events", s.events, "events to subscribe to, comma separated NRI names, or all")
	fs.Var(&s.env, "env", "KEY=VALUE to add to a created container's environment (repeatable)")
	fs.Var(&s.annotations, "annotation", "KEY=VALUE to add to a created container's annotations (repeatable)")
	fs.Var(&s.mounts, "mount", "DEST:SOURCE[:ro] bind mount to add to a created container (repeatable)")
	fs.Var(&s.devices, "device", "host device node PATH to add to a created container (repeatable)")
	fs.Int64Var(&s.cpuShares, "cpu-shares", s.cpuShares, "CPU shares to set on a created container")
	fs.Int64Var(&s.memoryLimit, "memory-limit", s.memoryLimit, "memory limit (bytes) to set on a created container")
	fs.Int64Var(&s.updateCPUShares, "update-cpu-shares", s.updateCPUShares,
		"CPU shares an updated container gets instead of the requested ones")
	fs.Int64Var(&s.ownCPUShares, "own-cpu-shares", s.ownCPUShares,
		"CPU shares a started container is given by an UpdateContainers of the plugin's own, once started")
}

type plugin struct {
	settings
	stub     stub.Stub
	mu       sync.Mutex
	out      *os.File
	shutDown bool // Shutdown came: the runtime closing the connection next is the normal end
}

// record is one JSON line: the event and what the tests look at.
type record map[string]any

func (p *plugin) write(r record) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.out == nil {
		p.out = os.Stdout
		if p.log != "" {
			out, err := os.OpenFile(p.log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
			if err != nil {
				fmt.Fprintf(os.Stderr, "nriplugin: %v\n", err)
				return
			}
			p.out = out
		}
	}
	r["stub"] = stubLine
	line, _ := json.Marshal(r)
	p.out.Write(append(line, '\n')) // one write per line: readers never see half a line
}

func podFields(r record, pod *api.PodSandbox) record {
	if pod != nil {
		r["pod"], r["pod_id"], r["pod_uid"], r["namespace"] = pod.GetName(), pod.GetId(), pod.GetUid(), pod.GetNamespace()
		r["pod_full"] = pod
	}
	return r
}

func containerFields(r record, pod *api.PodSandbox, ctr *api.Container) record {
	podFields(r, pod)
	if ctr != nil {
		r["container"], r["container_id"], r["state"] = ctr.GetName(), ctr.GetId(), ctr.GetState().String()
		r["container_full"] = ctr
	}
	return r
}

func resourceFields(r record, res *api.LinuxResources) record {
	if res != nil {
		r["resources_full"] = res
	}
	if res.GetCpu().GetShares() != nil {
		r["cpu_shares"] = res.GetCpu().GetShares().GetValue()
	}
	if res.GetMemory().GetLimit() != nil {
		r["memory_limit"] = res.GetMemory().GetLimit().GetValue()
	}
	return r
}

func (p *plugin) Configure(_ context.Context, config, runtime, version string) (stub.EventMask, error) {
	if config != "" {
		fs := flag.NewFlagSet("config", flag.ContinueOnError)
		p.bind(fs)
		if err := fs.Parse(strings.Fields(config)); err != nil {
			return 0, fmt.Errorf("config: %w", err)
		}
	}
	p.write(record{"event": "Configure", "runtime": runtime, "version": version, "config": config,
		"plugin_name": os.Getenv("NRI_PLUGIN_NAME"), "plugin_idx": os.Getenv("NRI_PLUGIN_IDX"),
		"plugin_socket": os.Getenv("NRI_PLUGIN_SOCKET")})
	if p.events == "" || p.events == "all" {
		return 0, nil // the stub then subscribes to every event this plugin handles
	}
	return api.ParseEventMask(p.events)
}

func (p *plugin) Synchronize(_ context.Context, pods []*api.PodSandbox,
	ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	podNames, ctrNames := []string{}, []string{}
	for _, pod := range pods {
		podNames = append(podNames, pod.GetName())
	}
	for _, ctr := range ctrs {
		ctrNames = append(ctrNames, ctr.GetName())
	}
	p.write(record{"event": "Synchronize", "pods": podNames, "containers": ctrNames, "pods_full": pods,
		"containers_full": ctrs})
	return nil, nil
}

func (p *plugin) Shutdown(context.Context) {
	p.write(record{"event": "Shutdown"})
	p.mu.Lock()
	p.shutDown = true
	p.mu.Unlock()
}

// endedNormally: Run's error is the runtime closing the connection, which after Shutdown is how a plugin's life ends.
// Stub v0.12 reports that as ErrServerClosed; v0.8 as nil or, when its connection watcher loses the race with the
// server loop, as io.EOF.
func (p *plugin) endedNormally(err error) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return err == nil || errors.Is(err, ttrpc.ErrServerClosed) || (p.shutDown && errors.Is(err, io.EOF))
}

func (p *plugin) podEvent(event string, pod *api.PodSandbox) error {
	p.write(podFields(record{"event": event}, pod))
	return nil
}

func (p *plugin) containerEvent(event string, pod *api.PodSandbox, ctr *api.Container) error {
	p.write(containerFields(record{"event": event}, pod, ctr))
	return nil
}

func (p *plugin) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	return p.podEvent("RunPodSandbox", pod)
}

func (p *plugin) StopPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	return p.podEvent("StopPodSandbox", pod)
}

func (p *plugin) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	return p.podEvent("RemovePodSandbox", pod)
}

func (p *plugin) CreateContainer(_ context.Context, pod *api.PodSandbox,
	ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	r := containerFields(record{"event": "CreateContainer", "args": ctr.GetArgs(), "env": ctr.GetEnv()}, pod, ctr)
	p.write(r)
	adjust, err := p.adjustment()
	return adjust, nil, err
}

// adjustment is what the flags ask to change in a created container.
func (p *plugin) adjustment() (*api.ContainerAdjustment, error) {
	adjust := &api.ContainerAdjustment{}
	for _, kv := range p.env {
		key, value, _ := strings.Cut(kv, "=")
		adjust.AddEnv(key, value)
	}
	for _, kv := range p.annotations {
		key, value, _ := strings.Cut(kv, "=")
		adjust.AddAnnotation(key, value)
	}
	for _, spec := range p.mounts {
		parts := strings.Split(spec, ":")
		if len(parts) < 2 {
			return nil, fmt.Errorf("mount %q: want DEST:SOURCE[:ro]", spec)
		}
		options := []string{"rbind", "rw"}
		if len(parts) > 2 && parts[2] == "ro" {
			options = []string{"rbind", "ro"}
		}
		adjust.AddMount(&api.Mount{Destination: parts[0], Source: parts[1], Type: "bind", Options: options})
	}
	for _, path := range p.devices {
		device, err := hostDevice(path)
		if err != nil {
			return nil, err
		}
		adjust.AddDevice(device)
	}
	if p.cpuShares > 0 {
		adjust.SetLinuxCPUShares(uint64(p.cpuShares))
	}
	if p.memoryLimit > 0 {
		adjust.SetLinuxMemoryLimit(p.memoryLimit)
	}
	return adjust, nil
}

func hostDevice(path string) (*api.LinuxDevice, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return nil, fmt.Errorf("device %s: %w", path, err)
	}
	kind := "c"
	if st.Mode&syscall.S_IFMT == syscall.S_IFBLK {
		kind = "b"
	}
	rdev := uint64(st.Rdev)
	major := int64((rdev>>8)&0xfff | (rdev>>32)&^0xfff)
	minor := int64(rdev&0xff | (rdev>>12)&^0xff)
	return &api.LinuxDevice{Path: path, Type: kind, Major: major, Minor: minor,
		FileMode: &api.OptionalFileMode{Value: st.Mode & 0o777}}, nil
}

func (p *plugin) PostCreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	return p.containerEvent("PostCreateContainer", pod, ctr)
}

func (p *plugin) StartContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	return p.containerEvent("StartContainer", pod, ctr)
}

func (p *plugin) PostStartContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	if p.ownCPUShares > 0 {
		go p.updateOnItsOwn(ctr.GetId()) // unsolicited: not an answer to an event
	}
	return p.containerEvent("PostStartContainer", pod, ctr)
}

// updateOnItsOwn asks the runtime for -own-cpu-shares on a container (the stub's UpdateContainers) and logs the
// outcome as an "UpdateContainers" record.
func (p *plugin) updateOnItsOwn(containerID string) {
	update := &api.ContainerUpdate{}
	update.SetContainerId(containerID)
	update.SetLinuxCPUShares(uint64(p.ownCPUShares))
	failed, err := p.stub.UpdateContainers([]*api.ContainerUpdate{update})
	r := record{"event": "UpdateContainers", "container_id": containerID, "failed": len(failed)}
	if err != nil {
		r["error"] = err.Error()
	}
	p.write(r)
}

func (p *plugin) UpdateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container,
	res *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	p.write(resourceFields(containerFields(record{"event": "UpdateContainer"}, pod, ctr), res))
	if p.updateCPUShares <= 0 {
		return nil, nil
	}
	update := &api.ContainerUpdate{}
	update.SetContainerId(ctr.GetId())
	update.SetLinuxCPUShares(uint64(p.updateCPUShares))
	return []*api.ContainerUpdate{update}, nil
}

func (p *plugin) PostUpdateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	return p.containerEvent("PostUpdateContainer", pod, ctr)
}

func (p *plugin) StopContainer(_ context.Context, pod *api.PodSandbox,
	ctr *api.Container) ([]*api.ContainerUpdate, error) {
	return nil, p.containerEvent("StopContainer", pod, ctr)
}

func (p *plugin) RemoveContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	return p.containerEvent("RemoveContainer", pod, ctr)
}

func main() {
	p := &plugin{}
	p.bind(flag.CommandLine)
	flag.Parse()
	var options []stub.Option
	if p.socket != "" {
		options = append(options, stub.WithSocketPath(p.socket))
	}
	if p.name != "" {
		options = append(options, stub.WithPluginName(p.name))
	}
	if p.idx != "" {
		options = append(options, stub.WithPluginIdx(p.idx))
	}
	s, err := stub.New(p, options...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nriplugin: %v\n", err)
		os.Exit(1)
	}
	p.stub = s
	if err := s.Run(context.Background()); !p.endedNormally(err) {
		fmt.Fprintf(os.Stderr, "nriplugin: %v\n", err)
		os.Exit(1)
	}
}
