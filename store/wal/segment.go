package wal

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"pigeon/internal/regfile"
	"pigeon/store"
)

// This file reads tidwall/wal segment files directly: Open scans every
// segment once (checksums, index building, torn-tail repair) before handing
// the directory to tidwall/wal, and the offline tools read them without
// opening a log at all.
//
// A tidwall/wal binary segment is a run of entries, each uvarint(len) + data;
// its file name is the 20-digit index of its first entry. A truncation in
// progress leaves NAME.START (TruncateFront) or NAME.END (TruncateBack),
// which tidwall/wal settles on its next open; listSegments settles them the
// same way, but only in memory.

// segFile is one segment of a log, in index order.
type segFile struct {
	path  string
	start uint64 // index of its first entry
}

func segmentName(index uint64) string { return fmt.Sprintf("%020d", index) }

// listSegments returns the segments of the log in dir as tidwall/wal would
// see them after settling START/END files. A missing dir is an empty log.
func listSegments(dir string) ([]segFile, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	var segs []segFile
	startIdx, endIdx := -1, -1
	for _, name := range names {
		if len(name) < 20 {
			continue
		}
		index, err := strconv.ParseUint(name[:20], 10, 64)
		if err != nil || index == 0 {
			continue
		}
		isStart := len(name) == 26 && strings.HasSuffix(name, ".START")
		isEnd := len(name) == 24 && strings.HasSuffix(name, ".END")
		if len(name) != 20 && !isStart && !isEnd {
			continue
		}
		if isStart {
			startIdx = len(segs)
		} else if isEnd && endIdx == -1 {
			endIdx = len(segs)
		}
		segs = append(segs, segFile{path: filepath.Join(dir, name), start: index})
	}
	if startIdx != -1 && endIdx != -1 {
		return nil, &store.CorruptError{File: dir, Offset: -1, Reason: "both START and END segments present"}
	}
	if startIdx != -1 {
		segs = segs[startIdx:]
	}
	if endIdx != -1 {
		segs = segs[:endIdx+1]
		if n := len(segs); n > 1 && segs[n-2].start == segs[n-1].start {
			segs[n-2] = segs[n-1]
			segs = segs[:n-1]
		}
	}
	return segs, nil
}

// scanStats is the result of scanning one log.
type scanStats struct {
	first, last uint64 // first index and last index (last = first-1 when empty)
	tailPath    string // the last segment file
	tailStart   uint64
	tailSize    int64 // good bytes of the last segment
	torn        bool  // the last segment has a torn tail after tailSize
	tornReason  string
	// zeroTails are the segments that end in preallocated space (see
	// preallocate): zero bytes from a record boundary, at good, to the end
	// of the file. Open cuts them off before tidwall/wal reads the files.
	zeroTails []segCut
}

// segCut is a segment file and the size it is to be cut to.
type segCut struct {
	path string
	size int64
}

// visitFunc receives each checked record with its index, file and offset.
type visitFunc func(index uint64, path string, off int64, rec []byte) error

// scanLog checks every record of the log in dir and calls visit for each.
// Corruption before the tail is a *store.CorruptError. A torn last record
// (crash mid-write) is reported in the stats, not repaired: see repairTail.
func scanLog(dir string, maxRecord int, visit visitFunc) (scanStats, error) {
	var st scanStats
	segs, err := listSegments(dir)
	if err != nil {
		return st, err
	}
	if len(segs) == 0 {
		st.first, st.last = 1, 0
		return st, nil
	}
	st.first = segs[0].start
	index := segs[0].start
	var buf scanBuf
	for i, seg := range segs {
		last := i == len(segs)-1
		if seg.start != index {
			return st, &store.CorruptError{File: seg.path, Offset: 0,
				Reason: fmt.Sprintf("segment starts at index %d, want %d", seg.start, index)}
		}
		n, good, torn, reason, zeros, err := scanSegment(seg.path, index, last, true, maxRecord, &buf, visit)
		if err != nil {
			return st, err
		}
		if zeros {
			st.zeroTails = append(st.zeroTails, segCut{seg.path, good})
		}
		index += n
		if last {
			st.tailPath, st.tailStart, st.tailSize = seg.path, seg.start, good
			st.torn, st.tornReason = torn, reason
		}
	}
	st.last = index - 1
	return st, nil
}

// scanSegment reads one segment file. It returns how many good records it
// holds and the offset just past the last good one. Only in the last
// segment may the tail be torn: a record whose length runs past the end of
// the file, or a final record (or one followed by nothing but zero bytes)
// that fails its checksum. With prealloc, the file may end in preallocated
// space: nothing but zero bytes from a record boundary to the end of the
// file (an empty record, which no write makes, begins with a zero byte);
// it ends the segment there, and zeros is true. Anything else is
// corruption.
// scanBuf holds the buffers a scan reuses from segment to segment.
type scanBuf struct {
	rec []byte
	rd  *bufio.Reader
}

func scanSegment(path string, index uint64, tailOK, prealloc bool, maxRecord int, buf *scanBuf, visit visitFunc) (n uint64, good int64, torn bool, reason string, zeros bool, err error) {
	n, good, torn, reason, err = scanRecords(path, index, tailOK, prealloc, maxRecord, buf, visit)
	if err == errZeroTail {
		return n, good, false, "", true, nil
	}
	return n, good, torn, reason, false, err
}

// errZeroTail ends scanRecords at preallocated space.
var errZeroTail = errors.New("preallocated space")

// sector is the unit a disk writes whole: a write that a crash left with
// holes (see scanRecords) reads as zero in whole sectors.
const sector = 512

func scanRecords(path string, index uint64, tailOK, prealloc bool, maxRecord int, buf *scanBuf, visit visitFunc) (n uint64, good int64, torn bool, reason string, err error) {
	f, fi, err := openRegular(path)
	if err != nil {
		return 0, 0, false, "", err
	}
	defer f.Close()
	size := fi.Size()
	if buf.rd == nil {
		buf.rd = bufio.NewReaderSize(f, 256<<10)
	} else {
		buf.rd.Reset(f)
	}
	r := buf.rd
	corrupt := func(off int64, why string) error {
		return &store.CorruptError{File: path, Offset: off, Reason: why}
	}
	var off int64
	for off < size {
		if prealloc {
			if b, perr := r.Peek(1); perr == nil && b[0] == 0 {
				if zeroRest(r) {
					return n, off, false, "", errZeroTail
				}
				// No write makes an empty record. In preallocated space
				// a crash can leave the start of the last batch unwritten
				// (zero) and a later part of it written: a sector of zeros
				// here is that; anything else is damage.
				if tailOK && zeroAt(f, off, min(off+sector, size)) {
					return n, off, true, "a write the crash left with holes", nil
				}
				return n, off, false, "", corrupt(off, fmt.Sprintf("record %d fails its checksum", index+n))
			}
		}
		length, vn, verr := readUvarint(r)
		if verr != nil {
			if tailOK && (errors.Is(verr, io.EOF) || errors.Is(verr, io.ErrUnexpectedEOF)) {
				return n, off, true, "length prefix cut short", nil
			}
			return n, off, false, "", corrupt(off, "bad length prefix")
		}
		if length > uint64(maxRecord)+recHeader+64 {
			return n, off, false, "", corrupt(off, fmt.Sprintf("record length %d exceeds the limit", length))
		}
		if uint64(size-off-int64(vn)) < length {
			if tailOK {
				if flipped, err := lengthFlipped(f, off, size, maxRecord); err != nil || flipped {
					return n, off, false, "", flippedError(path, err, corrupt(off, fmt.Sprintf("record %d: its length prefix is damaged", index+n)))
				}
				return n, off, true, "record runs past the end of the file", nil
			}
			return n, off, false, "", corrupt(off, "record runs past the end of the segment")
		}
		if cap(buf.rec) < int(length) {
			buf.rec = make([]byte, length)
		}
		rec := buf.rec[:length]
		if _, err := io.ReadFull(r, rec); err != nil {
			return n, off, false, "", fmt.Errorf("wal: read %s: %w", path, err)
		}
		end := off + int64(vn) + int64(length)
		if _, ok := checkRecord(rec); !ok {
			if tailOK && (end == size || prealloc && holed(rec, off+int64(vn)) || zeroRest(r)) {
				if flipped, err := lengthFlipped(f, off, size, maxRecord); err != nil || flipped {
					return n, off, false, "", flippedError(path, err, corrupt(off, fmt.Sprintf("record %d: its length prefix is damaged", index+n)))
				}
				return n, off, true, "last record fails its checksum", nil
			}
			return n, off, false, "", corrupt(off, fmt.Sprintf("record %d fails its checksum", index+n))
		}
		if visit != nil {
			if err := visit(index+n, path, off, rec); err != nil {
				if err == errStopScan {
					return n + 1, end, false, "", err
				}
				var ce *store.CorruptError
				if errors.As(err, &ce) || errors.Is(err, store.ErrTampered) {
					return n, off, false, "", err
				}
				return n, off, false, "", corrupt(off, fmt.Sprintf("record %d: %v", index+n, err))
			}
		}
		n++
		off = end
	}
	return n, off, false, "", nil
}

// openRegular opens path for reading without blocking, refusing with a
// *store.CorruptError whatever is not a regular file (a symbolic link is
// followed): a named pipe put in place of a file of the store would
// otherwise hold the open until a writer came, and a device (/dev/zero)
// or a directory would read as no records, or never end.
func openRegular(path string) (*os.File, os.FileInfo, error) {
	f, fi, err := regfile.Open(path)
	if errors.Is(err, regfile.ErrNotRegular) {
		return nil, nil, &store.CorruptError{File: path, Offset: 0, Reason: strings.TrimPrefix(err.Error(), path+": ")}
	}
	return f, fi, err
}

// lengthFlipped reports whether the record at off in f, which a torn write
// could have left (it runs past the end of the file, or fails its checksum
// with nothing but zeros after it), is instead a whole record whose length
// prefix has one bit flipped: with that bit flipped back it frames a
// record that passes its checksum. A write that a crash cut short has a
// whole prefix, since the prefix comes first; a damaged one may have
// acknowledged records after it, which must not be cut as a torn tail.
// It reads at most one record's worth of the file.
func lengthFlipped(f *os.File, off, size int64, maxRecord int) (bool, error) {
	n := min(size-off, int64(maxRecord)+recHeader+64+binary.MaxVarintLen64)
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, off); err != nil {
		return false, err
	}
	for i := range min(len(buf), binary.MaxVarintLen64) {
		for bit := range 8 {
			buf[i] ^= 1 << bit
			l, vn := binary.Uvarint(buf)
			ok := vn > 0 && l >= recHeader && l <= uint64(len(buf)-vn)
			if ok {
				_, ok = checkRecord(buf[vn : vn+int(l)])
			}
			buf[i] ^= 1 << bit
			if ok {
				return true, nil
			}
		}
	}
	return false, nil
}

// flippedError is the error of a tail that lengthFlipped did not clear:
// the read's when it failed, else the corruption.
func flippedError(path string, readErr, corrupt error) error {
	if readErr != nil {
		return fmt.Errorf("wal: read %s: %w", path, readErr)
	}
	return corrupt
}

func readUvarint(r *bufio.Reader) (uint64, int, error) {
	var x uint64
	var s uint
	for i := 0; i < binary.MaxVarintLen64; i++ {
		b, err := r.ReadByte()
		if err != nil {
			if i > 0 && errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, i, err
		}
		if b < 0x80 {
			if i == binary.MaxVarintLen64-1 && b > 1 {
				return 0, i + 1, errors.New("uvarint overflows")
			}
			return x | uint64(b)<<s, i + 1, nil
		}
		x |= uint64(b&0x7f) << s
		s += 7
	}
	return 0, binary.MaxVarintLen64, errors.New("uvarint overflows")
}

// zeroRest reports whether everything left in r is zero bytes.
// holed reports whether rec, read from file offset at, holds a hole a
// crash can leave in preallocated space: zero bytes from a sector boundary
// to the next one or to the end of rec. No record holds such a run (bodies
// are JSON text, which holds no zero byte), so a record failing its
// checksum with one is a write the crash cut short, not damage.
func holed(rec []byte, at int64) bool {
	end := at + int64(len(rec))
	for p := (at + sector - 1) &^ (sector - 1); p < end; p += sector {
		if allZero(rec[p-at : min(p+sector, end)-at]) {
			return true
		}
	}
	return false
}

// zeroAt reports whether the bytes of f from off to end are all zero.
func zeroAt(f *os.File, off, end int64) bool {
	b := make([]byte, min(end-off, 64<<10))
	for off < end {
		n := min(end-off, int64(len(b)))
		if _, err := f.ReadAt(b[:n], off); err != nil || !allZero(b[:n]) {
			return false
		}
		off += n
	}
	return true
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func zeroRest(r *bufio.Reader) bool {
	var b [4096]byte
	for {
		n, err := r.Read(b[:])
		for _, c := range b[:n] {
			if c != 0 {
				return false
			}
		}
		if err != nil {
			return errors.Is(err, io.EOF)
		}
	}
}

// truncateFile cuts path to size and syncs it.
func truncateFile(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// errStopScan, returned by a visitFunc, ends a scan after that record.
var errStopScan = errors.New("stop scan")

// cutLog makes the log in dir hold exactly the entries up to index keep:
// the segment that would hold keep+1 is cut just before it and every later
// segment is removed. It takes back a write that failed half way. It
// returns the new tail segment and its size.
func cutLog(dir string, keep uint64) (segFile, int64, error) {
	segs, err := listSegments(dir)
	if err != nil {
		return segFile{}, 0, err
	}
	t := -1
	for i, s := range segs {
		if s.start <= keep+1 {
			t = i
		}
	}
	if t < 0 {
		return segFile{}, 0, fmt.Errorf("wal: cut %s at %d: no segment", dir, keep)
	}
	tail := segs[t]
	var cut int64
	if want := keep + 1 - tail.start; want > 0 {
		var buf scanBuf
		n, good, _, _, _, err := scanSegment(tail.path, tail.start, true, true, 1<<31-1, &buf, func(index uint64, _ string, _ int64, _ []byte) error {
			if index == keep {
				return errStopScan
			}
			return nil
		})
		if err != nil && err != errStopScan {
			return segFile{}, 0, err
		}
		if n != want {
			return segFile{}, 0, fmt.Errorf("wal: cut %s at %d: segment holds only %d entries", dir, keep, n)
		}
		cut = good
	}
	if err := truncateFile(tail.path, cut); err != nil {
		return segFile{}, 0, err
	}
	for _, s := range segs[t+1:] {
		if err := os.Remove(s.path); err != nil {
			return segFile{}, 0, err
		}
	}
	return tail, cut, syncDir(dir)
}

// The modes of what the store creates: its owner's alone, since messages
// may hold personal data (the umask may only take bits away).
const (
	dirPerm  = 0o700
	filePerm = 0o600
)

// dirSynced, when set (tests), is told of every directory syncDir fsyncs.
var dirSynced func(dir string)

// syncDir fsyncs a directory so that created, renamed and removed entries
// are durable (fsyncDir: a no-op on Windows, which has no directory
// fsync).
func syncDir(dir string) error {
	if dirSynced != nil {
		dirSynced(dir)
	}
	return fsyncDir(dir)
}

// mkdirDurable creates dir and its missing parents and fsyncs the parent
// of each directory it created: until then a power loss may take a new
// directory's name back, and with it everything written below it.
func mkdirDurable(dir string) error {
	var created []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); !errors.Is(err, os.ErrNotExist) {
			break
		}
		created = append(created, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := os.MkdirAll(dir, dirPerm); err != nil {
		return err
	}
	for _, d := range created {
		if err := syncDir(filepath.Dir(d)); err != nil {
			return err
		}
	}
	return nil
}

// writeFileAtomic writes data to path through a temporary file, fsync and
// rename, then fsyncs the directory.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, filePerm)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(filepath.Dir(path))
}

// frame returns uvarint(len(rec)) + rec, the tidwall/wal binary framing,
// used for the files this package writes itself (snapshot, checkpoint).
func frame(dst, rec []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(rec)))
	return append(dst, rec...)
}

// framedSize is the on-disk size of an entry of n bytes.
func framedSize(n int) int64 {
	var b [binary.MaxVarintLen64]byte
	return int64(binary.PutUvarint(b[:], uint64(n)) + n)
}

// readFramedFile reads a file written whole by this package (snapshot,
// checkpoint) and calls visit for each record; any damage is corruption.
func readFramedFile(path string, maxRecord int, visit func(off int64, rec []byte) error) error {
	var buf scanBuf
	_, _, _, _, _, err := scanSegment(path, 1, false, false, maxRecord, &buf, func(_ uint64, _ string, off int64, rec []byte) error {
		return visit(off, rec)
	})
	return err
}
