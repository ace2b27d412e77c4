// Package console serves the operator's console: one HTML page, a small
// hand-written script and a style sheet, embedded in the binary (no CDN,
// nothing fetched at run time, no build step). The page is static: it
// holds no data and no token. Its script calls the admin and platform
// HTTP APIs (/v1/admin/..., /v1/platform/...) from the browser with the
// operator's bearer token, which it takes from the address's fragment
// (`strata token --console` prints such a login URL; browsers never send
// the fragment to the server) or from a paste-a-token form, keeps in
// sessionStorage, and removes from the address bar.
//
// The package imports httpapi (for the one error shape) and the
// standard library: the console knows the APIs' JSON, not the engine.
package console

import (
	"bytes"
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/strata-es/strata/httpapi"
)

//go:embed assets
var assets embed.FS

// Prefix is where the console is served.
const Prefix = "/console"

// Handler serves GET and HEAD of /console (redirected to /console/),
// /console/ (the page) and /console/assets/{file}. Responses forbid
// framing, sniffing and every origin but the console's own for scripts,
// styles and connections (a Content-Security-Policy), and carry no
// referrer.
func Handler() http.Handler {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded directory is part of the build
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		name := ""
		switch p := r.URL.Path; {
		case p == Prefix:
			http.Redirect(w, r, Prefix+"/", http.StatusMovedPermanently)
			return
		case p == Prefix+"/":
			name = "index.html"
		case strings.HasPrefix(p, Prefix+"/assets/"):
			name = strings.TrimPrefix(p, Prefix+"/assets/")
		}
		body, err := fs.ReadFile(sub, name)
		if name == "" || !fs.ValidPath(name) || err != nil {
			httpapi.WriteError(w, r, httpapi.Errorf(http.StatusNotFound, httpapi.CodeNotFound, "the console has no such page; open /console/"))
			return
		}
		http.ServeContent(w, r, path.Base(name), time.Time{}, bytes.NewReader(body))
	})
}
