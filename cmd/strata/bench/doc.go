// Package bench measures strata's hot paths next to the raw PostgreSQL
// limit of the same operation, measured in the same run on the same
// throwaway server: on shared, noisy machines only such ratios mean
// anything. Each workload runs several times; reports give the median with
// min and max, throughput and latency percentiles.
package bench
