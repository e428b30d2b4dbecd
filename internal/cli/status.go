package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/master/v1/masterv1connect"
	"github.com/glint-cluster/glint/pkg/ids"
	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/pkg/redact"
	"github.com/glint-cluster/glint/pkg/resources"
	"github.com/glint-cluster/glint/pkg/rpc"
)

// masterClient connects to the masters of a --master list — the one that
// leads answers — with the token clientToken finds, retrying calls for
// retryTimeout (--retry-timeout).
func (g *globals) masterClient(list string, retryTimeout time.Duration) (masterv1connect.MasterServiceClient, error) {
	masters, err := rpc.ParseURLs(list)
	if err != nil {
		return nil, fmt.Errorf("--master: %w", err)
	}
	token, err := g.clientToken(masters)
	if err != nil {
		return nil, err
	}
	return newMasterClient(masters, token, newRetrier(retryTimeout, len(masters), g.Stderr))
}

// newMasterClient calls the masters with token: each call goes through the
// list to the one that leads (rpc.NewFailoverHTTPClient) and, when it fails
// for a reason that passes, again as r retries it; a call nothing answered
// says what to do.
func newMasterClient(masters []string, token string, r retrier) (masterv1connect.MasterServiceClient, error) {
	client, err := rpc.NewFailoverHTTPClient(masters)
	if err != nil {
		return nil, err
	}
	// Outermost, the hint explains the final error; each try is traced and
	// carries the token.
	opts := append([]connect.ClientOption{connect.WithInterceptors(unreachableHint(strings.Join(masters, ", ")), r.interceptor())},
		rpc.ClientOptions(otel.GetTracerProvider(), token)...)
	return masterv1connect.NewMasterServiceClient(client, masters[0], opts...), nil
}

func newStatusCommand(g *globals) *cobra.Command {
	var masters string
	var asJSON bool
	var retryTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "status [APP_ID|DRIVER_ID]",
		Short: "Show the cluster, or one application or driver",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := g.masterClient(masters, retryTimeout)
			if err != nil {
				return err
			}
			redaction, err := g.Redactor()
			if err != nil {
				return err
			}
			resp, err := client.GetClusterState(cmd.Context(), connect.NewRequest(&masterv1.GetClusterStateRequest{}))
			if err != nil {
				return fmt.Errorf("get cluster state: %w", err)
			}
			// The master hides secrets; so does the CLI, in case the master is
			// older or matches fewer keys.
			st := redactState(redaction, resp.Msg)
			if len(args) == 1 {
				return printOne(g, st, args[0], asJSON)
			}
			if asJSON {
				return printJSON(g, st)
			}
			printCluster(g, st)
			return nil
		},
	}
	cmd.Flags().StringVar(&masters, "master", "http://localhost:7077", "master URL")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	retryFlag(cmd.Flags(), &retryTimeout)
	return cmd
}

// redactState hides the secret values of the commands in st (see
// redact.Redactor; r nil is Spark's default pattern) and returns it.
func redactState(r *redact.Redactor, st *masterv1.GetClusterStateResponse) *masterv1.GetClusterStateResponse {
	for _, a := range slices.Concat(st.GetActiveApps(), st.GetCompletedApps()) {
		a.Description = r.App(a.GetDescription())
	}
	for _, d := range slices.Concat(st.GetActiveDrivers(), st.GetCompletedDrivers()) {
		d.Description = r.Driver(d.GetDescription())
	}
	return st
}

func printJSON(g *globals, m proto.Message) error {
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(m)
	if err != nil {
		return err
	}
	fmt.Fprintln(g.Stdout, string(b))
	return nil
}

func printOne(g *globals, st *masterv1.GetClusterStateResponse, id string, asJSON bool) error {
	for _, a := range append(st.GetActiveApps(), st.GetCompletedApps()...) {
		if a.GetId() == id {
			if asJSON {
				return printJSON(g, a)
			}
			printApps(g, []*masterv1.ApplicationInfo{a}, true)
			return nil
		}
	}
	for _, d := range append(st.GetActiveDrivers(), st.GetCompletedDrivers()...) {
		if d.GetId() == id {
			if asJSON {
				return printJSON(g, d)
			}
			printDrivers(g, []*masterv1.DriverInfo{d})
			return nil
		}
	}
	if ids.ValidateApp(id) != nil && ids.ValidateDriver(id) != nil {
		return fmt.Errorf("%q is neither an application id (app-…) nor a driver id (driver-…)", id)
	}
	return fmt.Errorf("%s: not known to the master", id)
}

func printCluster(g *globals, st *masterv1.GetClusterStateResponse) {
	status := st.GetStatus()
	if st.GetEpoch() != 0 {
		status += fmt.Sprintf(", epoch %d", st.GetEpoch())
	}
	fmt.Fprintf(g.Stdout, "Master %s (%s)\n\nWorkers\n", st.GetMasterUrl(), status)
	tw := tabwriter.NewWriter(g.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tADDRESS\tSTATE\tCORES GRANTED\tMEMORY GRANTED\tMEASURED CPU\tMEASURED MEMORY\tLAST HEARTBEAT")
	for _, w := range st.GetWorkers() {
		fmt.Fprintf(tw, "%s\t%s:%d\t%s\t%d of %d\t%s of %s\t%.1f s\t%s\t%s ago\n", w.GetId(), w.GetHost(), w.GetPort(),
			lifecycle.Name(w.GetState()), w.GetCoresUsed(), w.GetCores(),
			resources.FormatMiB(w.GetMemoryUsedMib()), resources.FormatMiB(w.GetMemoryMib()),
			w.GetUsage().GetCpuSeconds(), resources.FormatBytes(w.GetUsage().GetMemoryBytes()),
			time.Since(w.GetLastHeartbeat().AsTime()).Round(time.Second))
	}
	tw.Flush()
	fmt.Fprintln(g.Stdout, "\nApplications")
	printApps(g, append(st.GetActiveApps(), st.GetCompletedApps()...), false)
	fmt.Fprintln(g.Stdout, "\nDrivers")
	printDrivers(g, append(st.GetActiveDrivers(), st.GetCompletedDrivers()...))
}

// appCores are the cores a holds, or held at most once it ended.
func appCores(a *masterv1.ApplicationInfo) int32 {
	if a.GetEndTime() != nil {
		return a.GetCoresPeak()
	}
	return a.GetCoresGranted()
}

func printApps(g *globals, apps []*masterv1.ApplicationInfo, executors bool) {
	tw := tabwriter.NewWriter(g.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tUSER\tSTATE\tCORES\tDURATION\tMEMORY/EXECUTOR\tEXECUTORS\tCPU USED\tMEMORY USED\tTRACE\tSTATUS")
	now := time.Now()
	for _, a := range apps {
		running := 0
		for _, e := range a.GetExecutors() {
			if e.GetState() == masterv1.ExecutorState_EXECUTOR_STATE_RUNNING {
				running++
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%d running\t%.1f s\t%s\t%s\t%s\n", a.GetId(), a.GetDescription().GetName(),
			orDash(a.GetOwner()), lifecycle.Name(a.GetState()), appCores(a), appDuration(a, now),
			resources.FormatMiB(a.GetDescription().GetMemoryPerExecutorMib()), running,
			a.GetUsage().GetCpuSeconds(), resources.FormatBytes(a.GetUsage().GetMemoryBytes()), orDash(a.GetTraceId()), appStatus(a))
	}
	tw.Flush()
	if !executors {
		return
	}
	for _, a := range apps {
		fmt.Fprintln(g.Stdout, "\nExecutors")
		tw := tabwriter.NewWriter(g.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tWORKER\tSTATE\tCORES\tMEMORY\tCPU USED / GRANTED\tMEMORY PEAK / LIMIT\tMESSAGE")
		for _, e := range a.GetExecutors() {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s / %s\t%s\n", e.GetId(), e.GetWorkerId(), lifecycle.Name(e.GetState()),
				e.GetCores(), resources.FormatMiB(e.GetMemoryMib()), executorCPU(e, time.Now()),
				resources.FormatBytes(e.GetUsage().GetMemoryPeakBytes()), resources.FormatMiB(e.GetMemoryMib()), e.GetMessage())
		}
		tw.Flush()
	}
}

// appDuration is how long a ran: from its start to its end, or to now while
// it runs; "-" when the master sent no start.
func appDuration(a *masterv1.ApplicationInfo, now time.Time) string {
	if a.GetStartTime() == nil {
		return "-"
	}
	end := now
	if a.GetEndTime() != nil {
		end = a.GetEndTime().AsTime()
	}
	d := end.Sub(a.GetStartTime().AsTime())
	if d < time.Minute {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// appStatus is an application's status message, and says when the master's
// --default-cores caps it.
func appStatus(a *masterv1.ApplicationInfo) string {
	msg := a.GetStatusMessage()
	if n := a.GetDefaultCores(); n > 0 {
		capped := fmt.Sprintf("capped at %d cores by the master's --default-cores (set --total-executor-cores to choose)", n)
		msg = strings.Join(slices.DeleteFunc([]string{capped, msg}, func(s string) bool { return s == "" }), "; ")
	}
	return msg
}

// executorCPU is the CPU e used against its cores: on average since it
// started while it runs, in seconds once it ended.
func executorCPU(e *masterv1.ExecutorInfo, now time.Time) string {
	var ran time.Duration
	if e.GetState() == masterv1.ExecutorState_EXECUTOR_STATE_RUNNING && e.GetStartedAt() != nil {
		ran = now.Sub(e.GetStartedAt().AsTime())
	}
	return resources.FormatCPU(e.GetUsage().GetCpuSeconds(), e.GetCores(), ran)
}

// orDash is s, or "-" for an empty column (an owner on a master without
// authentication).
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func printDrivers(g *globals, drivers []*masterv1.DriverInfo) {
	tw := tabwriter.NewWriter(g.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tUSER\tSTATE\tWORKER\tCORES\tMEMORY\tMESSAGE")
	for _, d := range drivers {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", d.GetId(), d.GetDescription().GetName(), orDash(d.GetOwner()), lifecycle.Name(d.GetState()),
			d.GetWorkerId(), d.GetDescription().GetCores(), resources.FormatMiB(d.GetDescription().GetMemoryMib()), d.GetMessage())
	}
	tw.Flush()
}

func newKillCommand(g *globals) *cobra.Command {
	var masters string
	var retryTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "kill APP_ID|DRIVER_ID",
		Short: "Kill an application or a driver",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := g.masterClient(masters, retryTimeout)
			if err != nil {
				return err
			}
			return kill(cmd.Context(), g, client, args[0])
		},
	}
	cmd.Flags().StringVar(&masters, "master", "http://localhost:7077", "master URL")
	retryFlag(cmd.Flags(), &retryTimeout)
	return cmd
}

func kill(ctx context.Context, g *globals, client masterv1connect.MasterServiceClient, id string) error {
	var err error
	switch {
	case strings.HasPrefix(id, "app-"):
		_, err = client.KillApplication(ctx, connect.NewRequest(&masterv1.KillApplicationRequest{AppId: id}))
	case strings.HasPrefix(id, "driver-"):
		_, err = client.KillDriver(ctx, connect.NewRequest(&masterv1.KillDriverRequest{DriverId: id}))
	default:
		return fmt.Errorf("%q is neither an application id (app-…) nor a driver id (driver-…)", id)
	}
	if err != nil {
		return fmt.Errorf("kill %s: %w", id, err)
	}
	fmt.Fprintf(g.Stdout, "Kill requested for %s\n", id)
	return nil
}
