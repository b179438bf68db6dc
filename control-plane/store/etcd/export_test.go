package etcd

import "context"

// SetImportStep has fn called after each committed step of s.Import but
// the last, with the number of keys written so far: a test's way to act
// in the middle of an Import.
func SetImportStep(s *Store, fn func(committed int)) { s.importStep = fn }

// Lost is s.lost: why the condition of an Import's step failed, nil when
// its last step committed after all.
func Lost(ctx context.Context, s *Store, u Unfinished) error { return s.lost(ctx, u) }
