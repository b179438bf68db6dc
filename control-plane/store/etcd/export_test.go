package etcd

// SetImportStep has fn called after each committed transaction of s.Import
// that writes the history, the index or the experiments, with the number
// of keys written so far: a test's way to act in the middle of an Import.
func SetImportStep(s *Store, fn func(written int)) { s.importStep = fn }
