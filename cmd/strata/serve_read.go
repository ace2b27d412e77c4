package main

// wireQuery mounts the query API (issue: read side).
func wireQuery(a *app) error { return nil }

// wireProjector starts the projection runners (issue: read side).
func wireProjector(a *app) error { return nil }
