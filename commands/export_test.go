package commands

// EventIDSpace is the namespace of event IDs, for the external tests.
var EventIDSpace = eventIDSpace
