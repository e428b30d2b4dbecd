package soak

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

// Launch is one directory a worker launched a process in: the worker's
// work dir, and how many launches its stdout's headers count.
type Launch struct {
	WorkDir  string
	Launches int
	Stdout   string
	Stderr   string
	// Name is the application's --name on the launch command, if any.
	Name string
}

// WorkDirs is what the workers' work dirs say was launched: each executor
// (application id/executor id) and each driver, with every directory it was
// launched in.
type WorkDirs struct {
	Executors map[string][]Launch
	Drivers   map[string][]Launch
}

var (
	appDirName    = regexp.MustCompile(`^app-[0-9]+-[0-9]+$`)
	driverDirName = regexp.MustCompile(`^driver-[0-9]+-[0-9]+$`)
	execDirName   = regexp.MustCompile(`^[0-9]+$`)
)

// ScanWorkDirs reads the work dirs of the workers: <dir>/<app-id>/<executor
// id>/stdout and <dir>/<driver-id>/stdout, counting the launch headers the
// worker writes before each launch. Spare directories (dot names) are not
// launches.
func ScanWorkDirs(dirs []string) (WorkDirs, error) {
	out := WorkDirs{Executors: map[string][]Launch{}, Drivers: map[string][]Launch{}}
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return out, err
		}
		for _, e := range entries {
			switch name := e.Name(); {
			case !e.IsDir():
			case driverDirName.MatchString(name):
				out.Drivers[name] = append(out.Drivers[name], readLaunch(dir, filepath.Join(dir, name)))
			case appDirName.MatchString(name):
				execs, err := os.ReadDir(filepath.Join(dir, name))
				if err != nil {
					return out, err
				}
				for _, x := range execs {
					if x.IsDir() && execDirName.MatchString(x.Name()) {
						key := name + "/" + x.Name()
						out.Executors[key] = append(out.Executors[key], readLaunch(dir, filepath.Join(dir, name, x.Name())))
					}
				}
			}
		}
	}
	return out, nil
}

// launchName is the --name argument of a launch header, which quotes each
// argument.
var launchName = regexp.MustCompile(`"--name" "([^"]*)"`)

func readLaunch(workDir, dir string) Launch {
	stdout, _ := os.ReadFile(filepath.Join(dir, "stdout"))
	stderr, _ := os.ReadFile(filepath.Join(dir, "stderr"))
	l := Launch{WorkDir: workDir, Stdout: string(stdout), Stderr: string(stderr),
		Launches: strings.Count(string(stdout), "Launch command:")}
	if m := launchName.FindStringSubmatch(l.Stdout); m != nil {
		l.Name = m[1]
	}
	return l
}

// DriversNamed returns the drivers launched for the application name, sorted.
func (w WorkDirs) DriversNamed(name string) []string {
	var out []string
	for _, id := range sortedKeys(w.Drivers) {
		if slices.ContainsFunc(w.Drivers[id], func(l Launch) bool { return l.Name == name }) {
			out = append(out, id)
		}
	}
	return out
}

// ExecutorTwice returns a violation for each executor launched more than
// once: in two work dirs, or twice in one.
func (w WorkDirs) ExecutorTwice() []Violation {
	var out []Violation
	for _, key := range sortedKeys(w.Executors) {
		n := 0
		var where []string
		for _, l := range w.Executors[key] {
			n += l.Launches
			where = append(where, fmt.Sprintf("%s ×%d", l.WorkDir, l.Launches))
		}
		if n > 1 {
			out = append(out, Violation{ExecutorTwice, fmt.Sprintf("executor %s launched %d times: %s", key, n, strings.Join(where, ", "))})
		}
	}
	return out
}

// DriverOutputs returns the runs of the drivers in chain, in the chain's
// order (and for a driver launched in two work dirs, in theirs), and the
// stderr of the chain's last driver.
func (w WorkDirs) DriverOutputs(chain []string) (runs []Output, lastStderr string) {
	for i, id := range chain {
		for _, l := range w.Drivers[id] {
			runs = append(runs, SplitOutput(l.Stdout, true)...)
			if i == len(chain)-1 {
				lastStderr += l.Stderr
			}
		}
	}
	return runs, lastStderr
}

// JobRecord is a submission as the run saw it.
type JobRecord struct {
	Job    Job
	Result Result
	// Chain is a cluster-mode job's drivers, first to last; Acknowledged
	// that its client was given the first one's id (else the chain is the
	// drivers the work dirs show launched under the job's name).
	Chain        []string
	Acknowledged bool
}

// CheckJob returns the invariants a finished job broke: a cluster-mode
// driver that ran though its client was told the submission failed, a
// client that printed its answer twice, a driver launched again (under its
// id or a new one) after a launch that printed the answer, a driver
// launched in two work dirs, or more applications registered under its
// name than its driver was launched (one in client mode).
func CheckJob(rec JobRecord, w WorkDirs, apps []string) []Violation {
	var out []Violation
	j := rec.Job
	if j.Deploy == DeployCluster && !rec.Acknowledged && len(rec.Chain) > 0 {
		out = append(out, Violation{RanThoughFailed, fmt.Sprintf("%s: its client was told the submission failed, yet driver %s ran",
			j.Name, strings.Join(rec.Chain, ", "))})
	}
	launches := 1
	if j.Deploy == DeployCluster {
		launches = 0
		for _, id := range rec.Chain {
			if ls := w.Drivers[id]; len(ls) > 1 {
				out = append(out, Violation{DriverTwice, fmt.Sprintf("%s: driver %s launched in %d work dirs", j.Name, id, len(ls))})
			}
			for _, l := range w.Drivers[id] {
				launches += l.Launches
			}
		}
	}
	answered, printed := Answered(rec.Result.Outputs, j.Want), timesPrinted(rec.Result.Outputs, j.Want)
	switch {
	case len(answered) > 0 && answered[0] < len(rec.Result.Outputs)-1:
		out = append(out, Violation{FinishedRelaunch, fmt.Sprintf("%s: launched again after launch %d of %d printed its answer (drivers %s; printed %d times)",
			j.Name, answered[0]+1, len(rec.Result.Outputs), strings.Join(rec.Chain, ", "), printed)})
	case printed > 1 && j.Deploy == DeployClient:
		out = append(out, Violation{AppTwice, fmt.Sprintf("%s: its answer was printed %d times", j.Name, printed)})
	case printed > 1:
		out = append(out, Violation{DriverTwice, fmt.Sprintf("%s: its answer was printed %d times by one launch", j.Name, printed)})
	}
	if len(apps) > launches {
		out = append(out, Violation{AppTwice, fmt.Sprintf("%s: %d applications registered (%s) for %d driver launches",
			j.Name, len(apps), strings.Join(apps, ", "), launches)})
	}
	return out
}

// timesPrinted counts the lines of outs that are want's first.
func timesPrinted(outs []Output, want []string) int {
	n := 0
	for _, o := range outs {
		for _, line := range o.Lines {
			if len(want) > 0 && line == want[0] {
				n++
			}
		}
	}
	return n
}

// Proc is a live process of the soak's binaries, with the GLINT_*
// variables a worker gives the processes it launches.
type Proc struct {
	PID        int
	Bin        string
	AppID      string
	ExecutorID string
	DriverID   string
	WorkerPID  int
}

// Key names the executor a process is ("" for others).
func (p Proc) Key() string {
	if p.AppID == "" || p.ExecutorID == "" {
		return ""
	}
	return p.AppID + "/" + p.ExecutorID
}

// Twin is an executor that several live processes are at once.
type Twin struct {
	Key  string
	PIDs []int
}

// Violation says what the twin is.
func (t Twin) Violation() Violation {
	return Violation{ExecutorTwice, fmt.Sprintf("executor %s is %d live processes at once: pids %v", t.Key, len(t.PIDs), t.PIDs)}
}

// Twins returns each executor that two or more live processes are.
func Twins(procs []Proc) []Twin {
	by := map[string][]int{}
	for _, p := range procs {
		if k := p.Key(); k != "" {
			by[k] = append(by[k], p.PID)
		}
	}
	var out []Twin
	for _, k := range sortedKeys(by) {
		if len(by[k]) > 1 {
			out = append(out, Twin{k, by[k]})
		}
	}
	return out
}

// Leftovers finds processes the cluster should have ended: a worker's
// child whose worker is gone, or an executor of an application that ended,
// still alive Grace after it was first seen so. Each is reported once.
type Leftovers struct {
	Grace time.Duration
	since map[int]time.Time
	told  map[int]bool
}

// Observe takes a scan at now. workers holds the pids of the workers that
// live (running or stopped); ended says whether an application ended.
func (l *Leftovers) Observe(now time.Time, procs []Proc, workers map[int]bool, ended func(appID string) bool) []Violation {
	if l.since == nil {
		l.since, l.told = map[int]time.Time{}, map[int]bool{}
	}
	var out []Violation
	seen := map[int]bool{}
	for _, p := range procs {
		var why string
		switch {
		case p.WorkerPID != 0 && !workers[p.WorkerPID]:
			why = fmt.Sprintf("its worker (pid %d) is gone", p.WorkerPID)
		case p.Key() != "" && workers[p.WorkerPID] && ended(p.AppID):
			why = fmt.Sprintf("its application %s ended", p.AppID)
		default:
			continue
		}
		seen[p.PID] = true
		first, ok := l.since[p.PID]
		if !ok {
			l.since[p.PID] = now
			continue
		}
		if now.Sub(first) > l.Grace && !l.told[p.PID] {
			l.told[p.PID] = true
			out = append(out, Violation{LeftBehind, fmt.Sprintf("pid %d (%s %s) still alive %s after %s",
				p.PID, filepath.Base(p.Bin), p.describe(), now.Sub(first).Round(time.Second), why)})
		}
	}
	for pid := range l.since {
		if !seen[pid] {
			delete(l.since, pid)
		}
	}
	return out
}

func (p Proc) describe() string {
	switch {
	case p.Key() != "":
		return "executor " + p.Key()
	case p.DriverID != "":
		return "driver " + p.DriverID
	}
	return "process"
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
