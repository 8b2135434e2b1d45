package main

import (
	"encoding/json"
	"sort"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

const masked = "<masked>"

// Keys whose values differ between two runs by nature, at any depth: times and usage counters (masked whether
// the runtime counted yet or not). Proto names, and the camelCase of containerd's verbose info JSON.
var maskedKeys = map[string]bool{
	"created_at": true, "started_at": true, "finished_at": true, "timestamp": true,
	"createdAt": true, "startedAt": true, "finishedAt": true,
	"usage_core_nano_seconds": true, "usage_nano_cores": true, "working_set_bytes": true, "available_bytes": true,
	"usage_bytes": true, "rss_bytes": true, "page_faults": true, "major_page_faults": true, "used_bytes": true,
	"inodes_used": true, "process_count": true, "swap_usage_bytes": true, "swap_available_bytes": true,
	"io_stats": true, "psi": true,
}

// Every field, zero or not, so a value left out by one side and present on the other (a counter still 0)
// cannot differ by presence only.
var protoJSON = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}

// plain turns an answer (a proto message, a list or map of them, or plain Go values) into JSON data, with the
// JSON documents of a verbose "info" map parsed so their fields can be masked too.
func plain(answer any) any {
	return parseInfo(encoded(answer))
}

func encoded(answer any) any {
	switch value := answer.(type) {
	case proto.Message:
		return roundTrip(protoJSON.Marshal(value))
	case []proto.Message:
		list := make([]any, 0, len(value))
		for _, item := range value {
			list = append(list, encoded(item))
		}
		return list
	case map[string]any:
		fields := make(map[string]any, len(value))
		for key, item := range value {
			fields[key] = encoded(item)
		}
		return fields
	}
	return roundTrip(json.Marshal(answer))
}

func roundTrip(data []byte, err error) any {
	if err != nil {
		return map[string]string{"unencodable": err.Error()}
	}
	var value any
	_ = json.Unmarshal(data, &value)
	return value
}

// sortedItems sorts a list answer's items by their JSON text: runtimes list in map order (containerd 1.6's
// ListImages ignores its filter and lists every image, in any order).
func sortedItems(answer any) any {
	fields, ok := answer.(map[string]any)
	if !ok {
		return answer
	}
	if items, ok := fields["items"].([]any); ok {
		sort.SliceStable(items, func(i, j int) bool { return jsonText(items[i]) < jsonText(items[j]) })
	}
	return answer
}

func jsonText(value any) string {
	data, _ := json.Marshal(value)
	return string(data)
}

func parseInfo(value any) any {
	switch typed := value.(type) {
	case map[string]any:
		for key, item := range typed {
			if documents, ok := item.(map[string]any); ok && key == "info" {
				for name, text := range documents {
					var parsed any
					if s, ok := text.(string); ok && json.Unmarshal([]byte(s), &parsed) == nil {
						documents[name] = parsed
					}
				}
				continue
			}
			typed[key] = parseInfo(item)
		}
	case []any:
		for i, item := range typed {
			typed[i] = parseInfo(item)
		}
	}
	return value
}

// normalized replaces every token (in strings, keys included; longest first, so a token containing another is
// replaced whole) by its placeholder, and every masked key's value by "<masked>".
func normalized(value any, tokens map[string]string) any {
	ordered := make([]string, 0, len(tokens))
	for token := range tokens {
		if token != "" {
			ordered = append(ordered, token)
		}
	}
	sort.Slice(ordered, func(i, j int) bool { return len(ordered[i]) > len(ordered[j]) })
	replace := func(text string) string {
		for _, token := range ordered {
			text = strings.ReplaceAll(text, token, tokens[token])
		}
		return text
	}
	var walk func(any) any
	walk = func(item any) any {
		switch typed := item.(type) {
		case string:
			return replace(typed)
		case map[string]any:
			result := make(map[string]any, len(typed))
			_, verboseInfo := typed["runtimeSpec"]
			for key, sub := range typed {
				// "pid" is also a namespace mode: only the pid of containerd's verbose info is a process's.
				if maskedKeys[key] || (key == "pid" && verboseInfo) {
					result[replace(key)] = masked
				} else {
					result[replace(key)] = walk(sub)
				}
			}
			return result
		case []any:
			result := make([]any, len(typed))
			for i, sub := range typed {
				result[i] = walk(sub)
			}
			return result
		}
		return item
	}
	return walk(value)
}
