// Package serverstat reads what the benches measure on a server: its CPU
// time from INFO cpu, and the median and range of repeated runs.
package serverstat

import (
	"context"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
)

// CPU reads the server's CPU time, in µs: of its main thread where INFO cpu
// reports it (Redis >= 7.0), else of the process. -1 when it cannot be read.
func CPU(ctx context.Context, c rueidis.Client) float64 {
	info, err := c.Do(ctx, c.B().Info().Section("cpu").Build()).ToString()
	if err != nil {
		return -1
	}
	v := map[string]float64{}
	for _, line := range strings.Split(info, "\n") {
		k, s, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			v[k] = f
		}
	}
	if sys, ok := v["used_cpu_sys_main_thread"]; ok {
		return (sys + v["used_cpu_user_main_thread"]) * 1e6
	}
	if sys, ok := v["used_cpu_sys"]; ok {
		return (sys + v["used_cpu_user"]) * 1e6
	}
	return -1
}
