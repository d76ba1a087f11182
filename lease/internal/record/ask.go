package record

import (
	"strconv"
	"strings"
)

// AskDir is where requests to release the records of the session whose
// key id is keyID live: under the prefix, in the space of the empty lock
// name, which no lock can have.
func AskDir(prefix, keyID string) string { return prefix + "/asks/" + keyID }

// AskKey is the request to release the record key created at rev. Record
// keys start with their session's key id, which the request key starts
// with too, so that a session watches one directory.
func AskKey(prefix, recordKey string, rev int64) string {
	slot := recordKey[strings.LastIndexByte(recordKey, '/')+1:]
	keyID, _, _ := strings.Cut(slot, "-")
	return AskDir(prefix, keyID+"-") + strconv.FormatInt(rev, 10)
}
