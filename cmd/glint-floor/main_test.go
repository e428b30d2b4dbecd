package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/glint-cluster/glint/internal/floor"
)

// The test binary runs as glint-floor when this is set.
const runMain = "GLINT_FLOOR_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMain) != "" {
		os.Args = append([]string{"glint-floor"}, strings.Fields(os.Getenv(runMain))...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestServeEndsWithItsStandardInput(t *testing.T) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), runMain+"=-serve")
	cmd.Stderr = os.Stderr
	stdin, _, _, err := floor.StartServe(cmd)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	defer func() {
		_ = cmd.Process.Kill()
		<-done
	}()
	go func() { done <- cmd.Wait() }()
	stdin.Close()
	select {
	case err := <-done:
		done <- err
		if err != nil {
			t.Fatalf("glint-floor -serve ended with %v once its standard input ended; want a clean exit", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("glint-floor -serve still runs a minute after its standard input ended")
	}
}
