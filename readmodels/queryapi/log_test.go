package queryapi_test

import (
	"log/slog"
	"os"
)

// runnerLogger shows the runners' warnings and errors, nothing else.
var runnerLogger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
