package driver

// MasterToken is what the masters call d with: tests speak as the master.
func MasterToken(d *Driver) string { return d.masterToken }
