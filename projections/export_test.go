package projections

// Internals the external tests (package projections_test, which may import
// the orders module) need.

func (c *RunnerConfig) SetDefaults()  { c.setDefaults() }
func (p *FailurePolicy) SetDefaults() { p.setDefaults() }
func LeaseKey(name string) int32      { return leaseKey(name) }

const LeaseClass = leaseClass
