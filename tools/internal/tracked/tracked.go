// Package tracked lists the files git tracks in a repository: the tree the
// tools under tools/ check (treelint's links and markers, archlint's sizes).
package tracked

import (
	"fmt"
	"os/exec"
	"strings"
)

// Files lists the files git tracks below root, relative to it.
func Files(root string) ([]string, error) {
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %w", err)
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f != "" {
			files = append(files, f)
		}
	}
	return files, nil
}
