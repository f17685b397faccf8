package wasmhost

import (
	"bytes"
	"encoding/binary"
	"net"
	"strconv"
	"strings"
	"unsafe"
)

// property resolves a proxy_get_property path for the current context.
//
// Paths are elements separated by NUL (the SDK's GetProperty([]string{...})).
// Lookup order:
//  1. values stored with proxy_set_property on the stream (or root context),
//     under the exact path;
//  2. the request's Properties, Config.Properties, then built-in values, all
//     keyed by the elements joined with "." ("source.address").
//
// As in Envoy, a single element that contains a dot ("source.address"
// passed as one element) is not split: only set_property values match it.
//
// Built-in values (Envoy encodings: strings raw, integers and timestamps as
// 8-byte little-endian int64, maps as serialized header maps):
//
//	plugin_name, plugin_root_id, plugin_vm_id, node.id
//	request.path, request.url_path, request.host, request.scheme,
//	request.method, request.referer, request.useragent, request.id
//	(x-request-id), request.protocol ("HTTP/1.1" unless given),
//	request.time (stream creation per the Clock), request.headers
//	response.code, response.headers (once response headers exist)
//	source.port, destination.port (from source.address/destination.address)
func (vm *VM) property(raw []byte) ([]byte, bool) {
	s, root := vm.cur.stream, vm.cur.root
	if s != nil && s.setProps != nil {
		if v, ok := s.setProps[string(raw)]; ok {
			return v, true
		}
	}
	if root != nil && root.props != nil {
		if v, ok := root.props[string(raw)]; ok {
			return v, true
		}
	}
	if bytes.IndexByte(raw, 0) < 0 && bytes.IndexByte(raw, '.') >= 0 {
		return nil, false // one element with a dot: Envoy would not find it either
	}
	dotted := append(vm.scratch[:0], raw...)
	for i, c := range dotted {
		if c == 0 {
			dotted[i] = '.'
		}
	}
	vm.scratch = dotted
	key := unsafe.String(unsafe.SliceData(dotted), len(dotted)) // not retained
	if len(dotted) == 0 {
		return nil, false
	}
	if s != nil {
		if v, ok := s.props[key]; ok {
			return v, true
		}
	}
	if v, ok := vm.h.cfg.Properties[key]; ok {
		return v, true
	}
	if s != nil {
		if v, ok := vm.streamProperty(s, key); ok {
			return v, true
		}
	}
	cfg := &vm.h.cfg
	switch key {
	case "plugin_name":
		return vm.str(cfg.PluginName), true
	case "plugin_root_id":
		return vm.str(cfg.RootID), true
	case "plugin_vm_id":
		return vm.str(cfg.VMID), true
	case "node.id":
		return vm.str(cfg.NodeID), true
	}
	return nil, false
}

func (vm *VM) str(s string) []byte {
	vm.props = append(vm.props[:0], s...)
	return vm.props
}

func (vm *VM) int64v(n int64) []byte {
	vm.props = binary.LittleEndian.AppendUint64(vm.props[:0], uint64(n))
	return vm.props
}

func (vm *VM) headerProp(h []Header, name string) ([]byte, bool) {
	for _, kv := range h {
		if kv[0] == name {
			return vm.str(kv[1]), true
		}
	}
	return nil, false
}

func (vm *VM) streamProperty(s *Stream, key string) ([]byte, bool) {
	if strings.HasPrefix(key, "request.") && s.hasReq {
		switch key[len("request."):] {
		case "path":
			return vm.headerProp(s.req, ":path")
		case "url_path":
			v, ok := vm.headerProp(s.req, ":path")
			if i := bytes.IndexByte(v, '?'); i >= 0 {
				v = v[:i]
			}
			return v, ok
		case "host":
			return vm.headerProp(s.req, ":authority")
		case "scheme":
			return vm.headerProp(s.req, ":scheme")
		case "method":
			return vm.headerProp(s.req, ":method")
		case "referer":
			return vm.headerProp(s.req, "referer")
		case "useragent":
			return vm.headerProp(s.req, "user-agent")
		case "id":
			return vm.headerProp(s.req, "x-request-id")
		case "protocol":
			return vm.str("HTTP/1.1"), true
		case "headers":
			vm.props = append(vm.props[:0], make([]byte, pairsSize(s.req))...)
			marshalPairs(vm.props, s.req)
			return vm.props, true
		}
	}
	switch key {
	case "request.time":
		return vm.int64v(s.created), true
	case "response.code":
		if s.hasResp {
			if code := statusOf(s.resp); code != 0 {
				return vm.int64v(int64(code)), true
			}
		}
	case "response.headers":
		if s.hasResp {
			vm.props = append(vm.props[:0], make([]byte, pairsSize(s.resp))...)
			marshalPairs(vm.props, s.resp)
			return vm.props, true
		}
	case "source.port", "destination.port":
		addr, ok := s.props[key[:len(key)-len("port")]+"address"]
		if !ok {
			break
		}
		_, port, err := net.SplitHostPort(string(addr))
		if err != nil {
			break
		}
		n, err := strconv.ParseInt(port, 10, 64)
		if err != nil {
			break
		}
		return vm.int64v(n), true
	}
	return nil, false
}
