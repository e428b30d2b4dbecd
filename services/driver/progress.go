package driver

// Progress is how far an application has come, as `glint submit --wait`
// shows it.
type Progress struct {
	// Executors is how many executors the master gave the application,
	// Registered how many of them registered with the driver, ended ones
	// included.
	Executors, Registered int
	// Tasks is every task the application asked to run so far, TasksDone
	// those that finished.
	Tasks, TasksDone int
}

// Progress returns the application's progress now.
func (d *Driver) Progress() Progress {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := Progress{Tasks: d.tasks, TasksDone: d.tasksDone}
	for _, e := range d.executors {
		p.Executors++
		if e.registered {
			p.Registered++
		}
	}
	return p
}
