package soak

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// Deploy is where a submission's driver runs.
type Deploy string

const (
	DeployClient  Deploy = "client"
	DeployCluster Deploy = "cluster"
)

// Job is one submission with a known outcome.
type Job struct {
	// Seq numbers the run's submissions from 1; Name (the application's
	// --name, unique in the run) is made from it.
	Seq  int
	Name string
	// Deploy, Supervise (cluster mode's --supervise) and MaxFailures1
	// (--conf spark.task.maxFailures=1) shape the submission.
	Deploy       Deploy
	Supervise    bool
	MaxFailures1 bool
	// App and Args are the built-in application and its arguments.
	App  string
	Args []string
	// Want is the output a success prints, exactly; Fails, when set, is
	// text the job's own error holds: the job is meant to fail so.
	Want  []string
	Fails string
}

// Inputs are the files the run's jobs read.
type Inputs struct {
	// WordFile is wordcount's input; WordTop what wordcount prints for it.
	WordFile string
	WordTop  []string
	// Missing is a path that does not exist: wordcount on it fails on its
	// own, with the error of opening it.
	Missing string
}

// jobKind is one kind of submission in the mix, with its weight.
type jobKind struct {
	weight int
	make   func(rng *rand.Rand, in Inputs) Job
}

var jobKinds = []jobKind{
	{20, func(rng *rand.Rand, _ Inputs) Job { return piJob(rng, DeployClient) }},
	{10, func(rng *rand.Rand, _ Inputs) Job { j := piJob(rng, DeployClient); j.MaxFailures1 = true; return j }},
	{10, func(_ *rand.Rand, in Inputs) Job { return wordJob(in, DeployClient) }},
	{8, func(rng *rand.Rand, _ Inputs) Job { return sleepJob(rng, DeployClient) }},
	{12, func(rng *rand.Rand, _ Inputs) Job { return piJob(rng, DeployCluster) }},
	{10, func(_ *rand.Rand, in Inputs) Job { j := wordJob(in, DeployCluster); j.MaxFailures1 = true; return j }},
	{10, func(rng *rand.Rand, _ Inputs) Job { j := piJob(rng, DeployCluster); j.Supervise = true; return j }},
	{6, func(rng *rand.Rand, _ Inputs) Job { j := sleepJob(rng, DeployCluster); j.Supervise = true; return j }},
	{7, func(_ *rand.Rand, in Inputs) Job { return missingJob(in, DeployClient) }},
	{7, func(_ *rand.Rand, in Inputs) Job { return missingJob(in, DeployCluster) }},
}

func piJob(rng *rand.Rand, d Deploy) Job {
	slices := 4 + rng.IntN(9)
	return Job{Deploy: d, App: "pi", Args: []string{strconv.Itoa(slices)}, Want: []string{PiLine(slices)}}
}

func wordJob(in Inputs, d Deploy) Job {
	return Job{Deploy: d, App: "wordcount", Args: []string{in.WordFile}, Want: in.WordTop}
}

func sleepJob(rng *rand.Rand, d Deploy) Job {
	dur, tasks := time.Duration(1+rng.IntN(3))*time.Second, 2+rng.IntN(3)
	return Job{Deploy: d, App: "sleep", Args: []string{dur.String(), strconv.Itoa(tasks)}, Want: []string{SleepLine(dur, tasks)}}
}

func missingJob(in Inputs, d Deploy) Job {
	return Job{Deploy: d, App: "wordcount", Args: []string{in.Missing}, Fails: "wordcount: open " + in.Missing + ": no such file or directory"}
}

// Mix is the run's sequence of jobs and how many are in flight, from the
// seed alone.
type Mix struct {
	rng  *rand.Rand
	mode Mode
	in   Inputs
	seq  int
}

// NewMix returns the job mix of a run.
func NewMix(seed uint64, mode Mode, in Inputs) *Mix {
	return &Mix{rng: rand.New(rand.NewPCG(seed, 2)), mode: mode, in: in}
}

// Next returns the next job.
func (m *Mix) Next() Job {
	total := 0
	for _, k := range jobKinds {
		total += k.weight
	}
	r := m.rng.IntN(total)
	var j Job
	for _, k := range jobKinds {
		if r < k.weight {
			j = k.make(m.rng, m.in)
			break
		}
		r -= k.weight
	}
	m.seq++
	j.Seq = m.seq
	kind := string(j.Deploy)
	if j.Supervise {
		kind += "-supervise"
	}
	j.Name = fmt.Sprintf("soak-%s-%04d-%s-%s", m.mode, j.Seq, kind, j.App)
	return j
}

// InFlight is how many jobs the run keeps in flight until the next one
// starts: 2 to 4.
func (m *Mix) InFlight() int { return 2 + m.rng.IntN(3) }

// SubmitArgs is j's glint submit command line (after the binary) against
// masters, with the client's token in tokenFile. Executors have one core
// each, two per application; a cluster-mode driver one core; everything
// 256 MiB.
func (j Job) SubmitArgs(masters []string, tokenFile string) []string {
	args := []string{"submit", "--token-file", tokenFile, "--log-level", "warn", "--master", strings.Join(masters, ","),
		"--name", j.Name, "--executor-cores", "1", "--total-executor-cores", "2", "--executor-memory", "256m"}
	if j.MaxFailures1 {
		args = append(args, "--conf", "spark.task.maxFailures=1")
	}
	if j.Deploy == DeployCluster {
		args = append(args, "--deploy-mode", "cluster", "--wait", "--driver-cores", "1", "--driver-memory", "256m")
		if j.Supervise {
			args = append(args, "--supervise")
		}
	}
	return append(append(args, j.App), j.Args...)
}
