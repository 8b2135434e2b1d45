//go:build !nri_v08

// The events stub v0.10+ added; a runtime that does not know them (containerd 1.7-2.1, this proxy) never sends
// them, and a plugin subscribing to them must still register there.
package main

import (
	"context"

	"github.com/containerd/nri/pkg/api"
)

const stubLine = "v0.12"

func (p *plugin) UpdatePodSandbox(_ context.Context, pod *api.PodSandbox, overhead, res *api.LinuxResources) error {
	p.write(resourceFields(podFields(record{"event": "UpdatePodSandbox"}, pod), res))
	return nil
}

func (p *plugin) PostUpdatePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	return p.podEvent("PostUpdatePodSandbox", pod)
}

func (p *plugin) ValidateContainerAdjustment(_ context.Context, req *api.ValidateContainerAdjustmentRequest) error {
	p.write(containerFields(record{"event": "ValidateContainerAdjustment"}, req.GetPod(), req.GetContainer()))
	return nil
}
