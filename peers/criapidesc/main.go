// Command criapidesc prints the CRI runtime.v1 protocol exactly as the pinned k8s.io/cri-api registers it (with
// the argument "nri": NRI's protocol as the pinned github.com/containerd/nri registers it):
// every message (nested ones and map entries included), enum and service, as JSON on stdout. The tests compare it
// with the descriptors of the proxy's own protos, so a drift from upstream fails instead of corrupting the wire.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"google.golang.org/protobuf/reflect/protoreflect"

	nriapi "github.com/containerd/nri/pkg/api"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

type field struct {
	Name           string `json:"name"`
	Number         int32  `json:"number"`
	Type           string `json:"type"`
	Label          string `json:"label"`
	TypeName       string `json:"type_name,omitempty"`
	Oneof          string `json:"oneof,omitempty"`
	Proto3Optional bool   `json:"proto3_optional,omitempty"`
}

type message struct {
	Name     string  `json:"name"`
	MapEntry bool    `json:"map_entry,omitempty"`
	Fields   []field `json:"fields"`
}

type enumValue struct {
	Name   string `json:"name"`
	Number int32  `json:"number"`
}

type enum struct {
	Name   string      `json:"name"`
	Values []enumValue `json:"values"`
}

type method struct {
	Name            string `json:"name"`
	Input           string `json:"input"`
	Output          string `json:"output"`
	ClientStreaming bool   `json:"client_streaming"`
	ServerStreaming bool   `json:"server_streaming"`
}

type service struct {
	Name    string   `json:"name"`
	Methods []method `json:"methods"`
}

type file struct {
	Path     string    `json:"path"`
	Package  string    `json:"package"`
	Messages []message `json:"messages"`
	Enums    []enum    `json:"enums"`
	Services []service `json:"services"`
}

func describeField(fd protoreflect.FieldDescriptor) field {
	out := field{
		Name:           string(fd.Name()),
		Number:         int32(fd.Number()),
		Type:           fd.Kind().String(),
		Label:          fd.Cardinality().String(),
		Proto3Optional: fd.HasOptionalKeyword() && fd.Syntax() == protoreflect.Proto3,
	}
	if md := fd.Message(); md != nil {
		out.TypeName = string(md.FullName())
	}
	if ed := fd.Enum(); ed != nil {
		out.TypeName = string(ed.FullName())
	}
	if od := fd.ContainingOneof(); od != nil {
		out.Oneof = string(od.Name())
	}
	return out
}

func describeEnum(ed protoreflect.EnumDescriptor) enum {
	out := enum{Name: string(ed.FullName()), Values: []enumValue{}}
	for i := 0; i < ed.Values().Len(); i++ {
		v := ed.Values().Get(i)
		out.Values = append(out.Values, enumValue{Name: string(v.Name()), Number: int32(v.Number())})
	}
	return out
}

// collect walks messages depth-first, so nested messages and enums (map entries too) are listed by full name.
func collect(msgs protoreflect.MessageDescriptors, enums protoreflect.EnumDescriptors, into *file) {
	for i := 0; i < enums.Len(); i++ {
		into.Enums = append(into.Enums, describeEnum(enums.Get(i)))
	}
	for i := 0; i < msgs.Len(); i++ {
		md := msgs.Get(i)
		out := message{Name: string(md.FullName()), MapEntry: md.IsMapEntry(), Fields: []field{}}
		for j := 0; j < md.Fields().Len(); j++ {
			out.Fields = append(out.Fields, describeField(md.Fields().Get(j)))
		}
		into.Messages = append(into.Messages, out)
		collect(md.Messages(), md.Enums(), into)
	}
}

func describe(fd protoreflect.FileDescriptor) file {
	out := file{Path: fd.Path(), Package: string(fd.Package()), Messages: []message{}, Enums: []enum{}, Services: []service{}}
	collect(fd.Messages(), fd.Enums(), &out)
	for i := 0; i < fd.Services().Len(); i++ {
		sd := fd.Services().Get(i)
		svc := service{Name: string(sd.FullName()), Methods: []method{}}
		for j := 0; j < sd.Methods().Len(); j++ {
			m := sd.Methods().Get(j)
			svc.Methods = append(svc.Methods, method{
				Name:            string(m.Name()),
				Input:           string(m.Input().FullName()),
				Output:          string(m.Output().FullName()),
				ClientStreaming: m.IsStreamingClient(),
				ServerStreaming: m.IsStreamingServer(),
			})
		}
		out.Services = append(out.Services, svc)
	}
	return out
}

func main() {
	// The descriptor the generated package registered at init, reached through one of its messages.
	fd := (&runtimeapi.VersionRequest{}).ProtoReflect().Descriptor().ParentFile()
	if len(os.Args) > 1 && os.Args[1] == "nri" {
		fd = (&nriapi.Empty{}).ProtoReflect().Descriptor().ParentFile()
	}
	encoder := json.NewEncoder(os.Stdout)
	encoder.SetIndent("", "  ")
	if err := encoder.Encode(describe(fd)); err != nil {
		fmt.Fprintln(os.Stderr, "criapidesc:", err)
		os.Exit(1)
	}
}
