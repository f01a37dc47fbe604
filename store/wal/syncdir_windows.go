//go:build windows

package wal

// fsyncDir does nothing: Windows has no directory fsync. Go opens a
// directory there only for reading, and FlushFileBuffers refuses a handle
// without write access (ERROR_ACCESS_DENIED), so the Unix way would fail
// every Open. NTFS records each create, rename and removal in its metadata
// journal, so a crash leaves each whole or undone, never half done (a
// rename over a file leaves the old file or the new one); it does not
// promise that the last few before a power loss are kept, which is the
// weaker guarantee a store has on Windows.
func fsyncDir(string) error { return nil }
