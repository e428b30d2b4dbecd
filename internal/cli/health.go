package cli

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/glint-cluster/glint/pkg/rpc"
)

// newHealthCommand is a container healthcheck that needs no shell or curl:
// it exits 0 when URL answers 200 within the timeout.
func newHealthCommand(g *globals) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "health URL",
		Short: "Exit 0 if URL (e.g. http://localhost:7077/healthz) answers 200",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, args[0], nil)
			if err != nil {
				return fmt.Errorf("health %s: %w", args[0], err)
			}
			resp, err := rpc.NewHTTPClient().Do(req)
			if err != nil {
				return fmt.Errorf("health %s: %w", args[0], err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("health %s: %s", args[0], resp.Status)
			}
			fmt.Fprintln(g.Stdout, "ok")
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "how long to wait for an answer")
	return cmd
}
