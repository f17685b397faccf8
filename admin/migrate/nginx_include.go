package migrate

// Following nginx's include directives (nginx.go): the files are read
// from the configuration's directory and their directives put in the
// include's place, as ngx_conf_include does.

import (
	"errors"
	"io/fs"
	"path"
	"strings"
)

// Bounds on following includes: nginx has none, but a file that includes
// itself would never end, and the files together are one input.
const (
	ngxMaxIncludeDepth = 8
	ngxMaxIncludeFiles = 1000
)

// ngxIncluder follows includes in files.
type ngxIncluder struct {
	files   fs.FS  // the configuration's directory (NginxOptions.Files)
	confDir string // that directory as absolute includes name it (NginxOptions.ConfDir)
	bytes   int    // read so far, the configuration given included
	count   int    // files read
}

// expand returns ds with every include it can follow replaced by the
// directives of the files it names, in nginx's order (a pattern's matches
// sorted by name). An include it cannot follow (outside the directory) is
// left for the reader to note.
func (in *ngxIncluder) expand(ds []*ngxDirective, depth int) ([]*ngxDirective, error) {
	out := make([]*ngxDirective, 0, len(ds))
	for _, d := range ds {
		if d.isBlock {
			var err error
			if d.block, err = in.expand(d.block, depth); err != nil {
				return nil, err
			}
		}
		if d.isBlock || d.name != "include" || len(d.args) != 1 {
			out = append(out, d)
			continue
		}
		name, ok := in.resolve(d.args[0])
		if !ok {
			out = append(out, d)
			continue
		}
		spliced, err := in.include(d, name, depth)
		if err != nil {
			return nil, err
		}
		out = append(out, spliced...)
	}
	return out, nil
}

// resolve turns an include's argument into a name in files: relative
// names are relative to the configuration's directory (nginx's prefix),
// absolute ones must be under confDir.
func (in *ngxIncluder) resolve(arg string) (string, bool) {
	name := arg
	if path.IsAbs(arg) {
		dir := strings.TrimSuffix(in.confDir, "/")
		if dir == "" || !strings.HasPrefix(arg, dir+"/") {
			return "", false
		}
		name = strings.TrimPrefix(arg, dir+"/")
	}
	name = path.Clean(name)
	return name, fs.ValidPath(name) && name != "."
}

// include reads the files name matches (a glob when it has *, ? or [; a
// pattern that matches nothing includes nothing, as in nginx), parses
// them and follows their own includes.
func (in *ngxIncluder) include(d *ngxDirective, name string, depth int) ([]*ngxDirective, error) {
	if depth >= ngxMaxIncludeDepth {
		return nil, lineErr(d.line, "include %s: includes nested more than %d deep; does a file include itself?", d.args[0], ngxMaxIncludeDepth)
	}
	matches := []string{name}
	if strings.ContainsAny(name, "*?[") {
		var err error
		if matches, err = fs.Glob(in.files, name); err != nil {
			return nil, lineErr(d.line, "include %s: %v", d.args[0], err)
		}
	}
	var out []*ngxDirective
	for _, m := range matches {
		src, err := fs.ReadFile(in.files, m)
		switch {
		case errors.Is(err, fs.ErrNotExist) && ngxStandardIncludes.MatchString(m):
			continue // mime.types and the like hold no limits: a copy may leave them out
		case errors.Is(err, fs.ErrNotExist):
			return nil, lineErr(d.line, "include %s: %s is not in the configuration's directory; copy it there (relative names are relative to the directory of the file given, absolute ones under -conf-dir %s)", d.args[0], m, in.confDir)
		case err != nil:
			return nil, lineErr(d.line, "include %s: %v", d.args[0], err)
		}
		in.bytes += len(src)
		if in.count++; in.count > ngxMaxIncludeFiles || in.bytes > maxInput {
			return nil, lineErr(d.line, "include %s: the configuration and the files it includes are more than %d files or %d bytes; convert the part that holds the limits", d.args[0], ngxMaxIncludeFiles, maxInput)
		}
		top, err := parseNginxConf(src, m)
		if err != nil {
			return nil, err
		}
		if top, err = in.expand(top, depth+1); err != nil {
			return nil, err
		}
		out = append(out, top...)
	}
	return out, nil
}
