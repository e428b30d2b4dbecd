package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/ids"
	"github.com/glint-cluster/glint/services/worker"
)

func newDecommissionCommand(g *globals) *cobra.Command {
	var masters string
	var retryTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "decommission WORKER_ID",
		Short: "Decommission a worker: nothing new is placed on it, its executors finish their tasks and stop",
		Long: "Decommission a worker (an operator's action; it needs the cluster token). The master places\n" +
			"nothing more on it and at once lets each application place replacements for its executors\n" +
			"elsewhere; the executors get no new tasks and stop once their running tasks are done. Their\n" +
			"ends count against neither the application nor its tasks. Sending SIGPWR to a worker does the same.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if err := ids.ValidateWorker(id); err != nil {
				return err
			}
			client, err := g.masterClient(masters, retryTimeout)
			if err != nil {
				return err
			}
			resp, err := client.DecommissionWorker(cmd.Context(), connect.NewRequest(&masterv1.DecommissionWorkerRequest{WorkerId: id}))
			if err != nil {
				return fmt.Errorf("decommission %s: %w", id, err)
			}
			if resp.Msg.GetAlready() {
				fmt.Fprintf(g.Stdout, "Worker %s was already decommissioned\n", id)
				return nil
			}
			fmt.Fprintf(g.Stdout, "Worker %s decommissioned\n", id)
			return nil
		},
	}
	cmd.Flags().StringVar(&masters, "master", "http://localhost:7077", "master URL")
	retryFlag(cmd.Flags(), &retryTimeout)
	return cmd
}

// decommissionOnSIGPWR decommissions w when the process gets SIGPWR, as
// Spark's worker does, until ctx ends.
func decommissionOnSIGPWR(ctx context.Context, w *worker.Server) {
	pwr := make(chan os.Signal, 1)
	signal.Notify(pwr, syscall.SIGPWR)
	go func() {
		defer signal.Stop(pwr)
		for {
			select {
			case <-ctx.Done():
				return
			case <-pwr:
				w.Decommission()
			}
		}
	}()
}
