// Package rpctest serves handlers in tests as Glint's processes do (Serve),
// and fuzzes a Glint process's Connect handler: any bytes, as a protobuf or a
// JSON body, posted to any procedure of its service.
package rpctest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/glint-cluster/glint/pkg/rpc"
)

// Serve serves h on a loopback port with rpc.NewServer's protocols and
// limits until the test ends, and returns its URL.
func Serve(t testing.TB, h http.Handler) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config = rpc.NewServer(h)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// Target is what Fuzz calls.
type Target struct {
	// Service is the service whose procedures are called.
	Service protoreflect.ServiceDescriptor
	// Handler returns the handler to call for one input (a fresh one, or
	// one kept across inputs).
	Handler func(t *testing.T) http.Handler
	// Seeds are requests added to the corpus, in both encodings, besides an
	// empty request for each procedure.
	Seeds []proto.Message
	// Codes are the codes an answer may have besides success.
	Codes []connect.Code
	// Check, when set, checks the target's invariants after each call.
	Check func(t *testing.T)
	// Token, when set, is the bearer token the handler accepts: each input
	// is sent with it or without, and without it must be Unauthenticated.
	Token string
}

// Fuzz runs t's fuzz test: each input names a procedure (by index), an
// encoding and a body; the answer must be success or a Connect error with one
// of t.Codes, and nothing may panic.
func Fuzz(f *testing.F, target Target) {
	methods := target.Service.Methods()
	for i := range methods.Len() {
		empty := dynamicpb.NewMessage(methods.Get(i).Input())
		target.Seeds = append(target.Seeds, empty)
	}
	for _, m := range target.Seeds {
		i := slices.IndexFunc(allMethods(methods), func(md protoreflect.MethodDescriptor) bool {
			return md.Input().FullName() == m.ProtoReflect().Descriptor().FullName()
		})
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(i), false, true, b)
		j, err := protojson.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(i), true, true, j)
		f.Add(uint8(i), true, false, j)
	}
	f.Fuzz(func(t *testing.T, method uint8, isJSON, withToken bool, body []byte) {
		md := methods.Get(int(method) % methods.Len())
		token := ""
		if withToken {
			token = target.Token
		}
		code, msg := Call(target.Handler(t), "/"+string(target.Service.FullName())+"/"+string(md.Name()), token, isJSON, body)
		if target.Token != "" && token == "" && code != connect.CodeUnauthenticated.String() {
			t.Fatalf("%s without a token: answered %q: %s", md.Name(), code, msg)
		}
		if code != "" && code != connect.CodeUnauthenticated.String() && !slices.ContainsFunc(target.Codes, func(c connect.Code) bool { return c.String() == code }) {
			t.Fatalf("%s: answered %s: %s", md.Name(), code, msg)
		}
		if target.Check != nil {
			target.Check(t)
		}
	})
}

func allMethods(ms protoreflect.MethodDescriptors) []protoreflect.MethodDescriptor {
	out := make([]protoreflect.MethodDescriptor, ms.Len())
	for i := range out {
		out[i] = ms.Get(i)
	}
	return out
}

// Call posts body to procedure on h as a Connect unary call, with token as
// its bearer token unless it is "", and returns the code of the answer (""
// for success) and its message.
func Call(h http.Handler, procedure, token string, isJSON bool, body []byte) (code, message string) {
	req := httptest.NewRequest(http.MethodPost, procedure, bytes.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/proto")
	if isJSON {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code == http.StatusOK {
		return "", ""
	}
	var wire struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if err := json.NewDecoder(io.LimitReader(rec.Body, 1<<20)).Decode(&wire); err != nil || wire.Code == "" {
		return "http " + http.StatusText(rec.Code), rec.Body.String()
	}
	return wire.Code, wire.Message
}
