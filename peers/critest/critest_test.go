// Package critest is the project's runner of critest's specs: the CRI validation suite of cri-tools
// (sigs.k8s.io/cri-tools/pkg/validate), built with `go test -c` into a binary named critest that takes
// critest's flags: --runtime-endpoint, --image-endpoint, the other framework flags, -ginkgo.focus,
// -ginkgo.skip, -ginkgo.junit-report, and -parallel N.
//
// cri-tools' own cmd/critest is a test file too (not importable); this is the same idea, smaller: no
// benchmarks (not registered, so none is listed), no /etc/crictl.yaml (endpoints come from the flags).
package critest

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onsi/ginkgo/v2"
	ginkgotypes "github.com/onsi/ginkgo/v2/types"
	"github.com/onsi/gomega"

	"sigs.k8s.io/cri-tools/pkg/framework"
	_ "sigs.k8s.io/cri-tools/pkg/validate" // registers the specs
	"sigs.k8s.io/cri-tools/pkg/version"
)

var (
	parallel  = flag.Int("parallel", 1, "the number of parallel spec processes (needs the ginkgo CLI)")
	ginkgoCLI = flag.String("ginkgo-cli", "ginkgo", "the ginkgo CLI that runs the specs in parallel processes")
)

func init() {
	framework.RegisterFlags()
}

func TestCRIValidation(t *testing.T) {
	fmt.Printf("critest version: %s\n", version.Version) // stamped at link time by rplab.peers
	if *parallel > 1 {
		runParallel(t)
		return
	}
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "CRI validation")
}

// runParallel runs this very binary under the ginkgo CLI with --nodes, as critest does: the CLI takes a
// precompiled suite only by a name ending in .test, and its own flags (focus, skip, junit report ...)
// in CLI form, while the framework's flags follow "--" for each process.
func runParallel(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatalf("own path: %v", err)
	}
	suite := filepath.Join(t.TempDir(), "critest.test")
	if err := os.Symlink(self, suite); err != nil {
		t.Fatalf("link the suite: %v", err)
	}
	suiteConfig, reporterConfig := ginkgo.GinkgoConfiguration()
	ginkgoArgs, err := ginkgotypes.GenerateFlagArgs(
		ginkgotypes.SuiteConfigFlags.CopyAppend(ginkgotypes.ReporterConfigFlags...),
		map[string]any{"S": &suiteConfig, "R": &reporterConfig})
	if err != nil {
		t.Fatalf("ginkgo flags: %v", err)
	}
	args := append(ginkgoArgs, fmt.Sprintf("--nodes=%d", *parallel), suite, "--")
	flag.Visit(func(f *flag.Flag) {
		// ginkgo's own flags went above; the slice-valued ones cannot be read back through String().
		if strings.HasPrefix(f.Name, "ginkgo.") || strings.HasPrefix(f.Name, "test.") ||
			f.Name == "parallel" || f.Name == "ginkgo-cli" {
			return
		}
		args = append(args, fmt.Sprintf("-%s=%s", f.Name, f.Value.String()))
	})
	cmd := exec.CommandContext(t.Context(), *ginkgoCLI, args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("ginkgo --nodes=%d: %v", *parallel, err)
	}
}
