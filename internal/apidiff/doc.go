// Command apidiff lists the changes to the exported API of every public
// package of the module between two versions — by default the previous
// commit of main and the working tree — so that a breaking change landing
// on main is a decision written in CHANGELOG.md, not an accident (issue 34
// §6, ARCHITECTURE decision 15). `make apidiff` runs it, and `make test`
// runs that.
//
// It drives golang.org/x/exp's apidiff (the Makefile installs a pinned
// version from the Go module proxy and passes its path): the base commit is
// written out of git into a directory of its own and its export data taken
// there (kept per commit in the user's cache directory, so only the first
// run for a base compiles it), then compared with the new side. The changes
// are printed per package, incompatible first. It never fails on a change,
// nor when it cannot compare (a single-commit or shallow clone, no network
// and nothing cached): it says why and exits 0, since the check informs and
// the tests decide.
package main
