// Package master is Glint's Master: it admits workers, applications and drivers,
// tracks their states and places drivers and executors on workers as Spark's
// standalone Master does.
package master
