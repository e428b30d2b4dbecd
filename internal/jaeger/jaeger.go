// Package jaeger reads traces back from Jaeger's HTTP query API (the one its
// UI uses: /api/traces), for glint trace and for tests that check what Glint
// exported.
package jaeger

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrNoTrace is returned when Jaeger has no trace matching a search.
var ErrNoTrace = errors.New("no such trace")

// Client queries one Jaeger.
type Client struct {
	// URL is Jaeger's query address, e.g. http://localhost:16686.
	URL  string
	HTTP *http.Client
}

// Span is one span as Jaeger returns it, with its service resolved.
type Span struct {
	TraceID       string      `json:"traceID"`
	SpanID        string      `json:"spanID"`
	OperationName string      `json:"operationName"`
	References    []Reference `json:"references"`
	StartTime     int64       `json:"startTime"` // µs since the epoch
	Duration      int64       `json:"duration"`  // µs
	Tags          []KeyValue  `json:"tags"`
	Logs          []struct {
		Timestamp int64      `json:"timestamp"`
		Fields    []KeyValue `json:"fields"`
	} `json:"logs"`
	ProcessID string `json:"processID"`
	// Service and ProcessTags describe the process that made the span.
	Service     string     `json:"-"`
	ProcessTags []KeyValue `json:"-"`
}

// Reference links a span to its parent (CHILD_OF) or to another (FOLLOWS_FROM).
type Reference struct {
	RefType string `json:"refType"`
	TraceID string `json:"traceID"`
	SpanID  string `json:"spanID"`
}

// KeyValue is a tag or log field.
type KeyValue struct {
	Key   string `json:"key"`
	Type  string `json:"type"`
	Value any    `json:"value"`
}

// Trace is a whole trace.
type Trace struct {
	TraceID   string `json:"traceID"`
	Spans     []Span `json:"spans"`
	Processes map[string]struct {
		ServiceName string     `json:"serviceName"`
		Tags        []KeyValue `json:"tags"`
	} `json:"processes"`
}

// Parent returns the span id of s's parent in its own trace, or "".
func (s Span) Parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" && r.TraceID == s.TraceID {
			return r.SpanID
		}
	}
	return ""
}

// Tag returns the value of tag key as a string, and whether s has it: a tag
// of the span's own, or else of its process.
func (s Span) Tag(key string) (string, bool) {
	for _, kv := range slices.Concat(s.Tags, s.ProcessTags) {
		if kv.Key == key {
			return fmt.Sprint(kv.Value), true
		}
	}
	return "", false
}

// Failed reports whether the span's status is Error.
func (s Span) Failed() bool {
	if v, ok := s.Tag("otel.status_code"); ok && v == "ERROR" {
		return true
	}
	v, ok := s.Tag("error")
	return ok && v == "true"
}

// HasEvent reports whether the span has an event (Jaeger: a log) named name,
// such as "exception".
func (s Span) HasEvent(name string) bool {
	for _, l := range s.Logs {
		for _, f := range l.Fields {
			if f.Key == "event" && fmt.Sprint(f.Value) == name {
				return true
			}
		}
	}
	return false
}

// Start is when the span began.
func (s Span) Start() time.Time { return time.UnixMicro(s.StartTime) }

// Find searches the last week for traces of service with a span carrying all
// tags, and returns the id of the most recent one.
func (c *Client) Find(ctx context.Context, service string, tags map[string]string) (string, error) {
	traces, err := c.Search(ctx, service, "", tags, 20)
	if err != nil {
		return "", err
	}
	if len(traces) == 0 {
		return "", fmt.Errorf("%w: no trace of %s with %s in Jaeger at %s", ErrNoTrace, service, formatTags(tags), c.URL)
	}
	latest := slices.MaxFunc(traces, func(a, b Trace) int { return cmp.Compare(a.start(), b.start()) })
	return latest.TraceID, nil
}

// Search returns up to limit traces of the last week that hold a span of
// service (and of operation, unless it is "") carrying all tags, each with
// every span's Service filled in.
func (c *Client) Search(ctx context.Context, service, operation string, tags map[string]string, limit int) ([]Trace, error) {
	tagJSON, err := json.Marshal(tags)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	q := url.Values{
		"service": {service},
		"tags":    {string(tagJSON)},
		"start":   {strconv.FormatInt(now.Add(-7*24*time.Hour).UnixMicro(), 10)},
		"end":     {strconv.FormatInt(now.Add(time.Minute).UnixMicro(), 10)},
		"limit":   {strconv.Itoa(limit)},
	}
	if operation != "" {
		q.Set("operation", operation)
	}
	var traces []Trace
	if err := c.get(ctx, "/api/traces?"+q.Encode(), &traces); err != nil {
		return nil, err
	}
	for i := range traces {
		traces[i].resolve()
	}
	return traces, nil
}

func (t Trace) start() int64 {
	if len(t.Spans) == 0 {
		return 0
	}
	return slices.MinFunc(t.Spans, func(a, b Span) int { return cmp.Compare(a.StartTime, b.StartTime) }).StartTime
}

// Trace fetches trace id, with every span's Service filled in.
func (c *Client) Trace(ctx context.Context, id string) (*Trace, error) {
	var traces []Trace
	if err := c.get(ctx, "/api/traces/"+url.PathEscape(id), &traces); err != nil {
		return nil, err
	}
	if len(traces) == 0 {
		return nil, fmt.Errorf("%w: trace %s is not in Jaeger at %s", ErrNoTrace, id, c.URL)
	}
	t := &traces[0]
	t.resolve()
	return t, nil
}

// resolve fills in each span's Service and ProcessTags from the trace's processes.
func (t *Trace) resolve() {
	for i := range t.Spans {
		p := t.Processes[t.Spans[i].ProcessID]
		t.Spans[i].Service, t.Spans[i].ProcessTags = p.ServiceName, p.Tags
	}
}

// get fetches path and decodes the "data" of Jaeger's response envelope.
func (c *Client) get(ctx context.Context, path string, data any) error {
	base := strings.TrimRight(c.URL, "/")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return fmt.Errorf("query jaeger at %s: %w", c.URL, err)
	}
	client := c.HTTP
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return fmt.Errorf("jaeger at %s is unreachable: %w", c.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return fmt.Errorf("read from jaeger at %s: %w", c.URL, err)
	}
	if resp.StatusCode == http.StatusNotFound {
		return fmt.Errorf("%w: jaeger at %s answered 404 for %s", ErrNoTrace, c.URL, path)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("jaeger at %s answered %s: %s", c.URL, resp.Status, strings.TrimSpace(string(body[:min(len(body), 200)])))
	}
	envelope := struct {
		Data   json.RawMessage `json:"data"`
		Errors []struct {
			Msg string `json:"msg"`
		} `json:"errors"`
	}{}
	if err := json.Unmarshal(body, &envelope); err != nil {
		return fmt.Errorf("jaeger at %s: not Jaeger's JSON: %w", c.URL, err)
	}
	if len(envelope.Errors) > 0 {
		return fmt.Errorf("jaeger at %s: %s", c.URL, envelope.Errors[0].Msg)
	}
	if len(envelope.Data) == 0 || string(envelope.Data) == "null" {
		return nil
	}
	return json.Unmarshal(envelope.Data, data)
}

// formatTags writes tags as Jaeger's search box takes them: k=v, space
// separated, sorted by key.
func formatTags(tags map[string]string) string {
	pairs := make([]string, 0, len(tags))
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		pairs = append(pairs, k+"="+tags[k])
	}
	return strings.Join(pairs, " ")
}
