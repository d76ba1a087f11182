package lease

import (
	"strconv"
	"strings"
)

// A lock record lives at <prefix><name>/<session id>-<slot>; its value is
// encodeValue(owner token, hold count) and it is attached to the session
// lease of the Client that wrote it. The record with the lowest creation
// revision under <prefix><name>/ holds the lock.

// dirOf returns the directory of a record key: <prefix><name>/.
func dirOf(key string) string {
	return key[:strings.LastIndexByte(key, '/')+1]
}

// dirName returns the lock name of a record key.
func dirName(key string) string {
	d := strings.TrimSuffix(dirOf(key), "/")
	return d[strings.LastIndexByte(d, '/')+1:]
}

// encodeValue is the stored value of a lock record: the owner token and the
// hold count.
func encodeValue(tok string, count int) string {
	return tok + "#" + strconv.Itoa(count)
}

// decodeValue parses a record's value; ok is false for a value that no
// fencekit Client wrote.
func decodeValue(v []byte) (tok string, count int, ok bool) {
	s := string(v)
	i := strings.LastIndexByte(s, '#')
	if i <= 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(s[i+1:])
	if err != nil || n <= 0 {
		return "", 0, false
	}
	return s[:i], n, true
}
