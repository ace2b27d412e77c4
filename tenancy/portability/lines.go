package portability

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// lineReader reads a file of the archive line by line, never holding more
// than one line of at most max bytes (issue 29, finding 8: json.Decoder
// over a whole file buffers a 200 MiB line whole). A line over the limit
// is refused as soon as the limit is passed, without reading the rest.
type lineReader struct {
	r    *bufio.Reader
	file string
	max  int
	buf  []byte
	n    int64 // lines returned
}

func newLineReader(r io.Reader, file string, max int) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 64<<10), file: file, max: max}
}

// next returns the next line without its newline (valid until the next
// call), or io.EOF after the last. A file that does not end with a
// newline is refused: the manifest counts lines by their newlines.
func (l *lineReader) next() ([]byte, error) {
	l.buf = l.buf[:0]
	for {
		chunk, err := l.r.ReadSlice('\n')
		if len(l.buf)+len(chunk) > l.max+1 { // +1: the newline
			return nil, fmt.Errorf("%w: %s line %d is longer than the line-length limit of %d bytes (--max-line)", ErrOverLimit, l.file, l.n+1, l.max)
		}
		l.buf = append(l.buf, chunk...)
		switch {
		case err == nil:
			l.n++
			return l.buf[:len(l.buf)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if len(l.buf) == 0 {
				return nil, io.EOF
			}
			return nil, fmt.Errorf("%w: %s does not end with a newline", ErrBadArchive, l.file)
		default:
			return nil, err
		}
	}
}
