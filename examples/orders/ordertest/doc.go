// Package ordertest is the orders module's test data: it generates
// realistic order histories exactly as the write side would store them
// (every event decided by the order aggregate), interleaved like
// concurrent traffic; seeds them into a strata event log fast; renders the
// order read models as text (Dump) and computes, without PostgreSQL, what
// they must hold (Expected, an independent oracle). The orders module's
// tests, the engine's own tests, benchmarks and the fault harness use it.
package ordertest
