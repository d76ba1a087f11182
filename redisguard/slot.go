package redisguard

import "strings"

// SlotCount is the number of hash slots of a Redis Cluster.
const SlotCount = 16384

// Slot returns the Redis Cluster hash slot of key, as the cluster computes
// it: CRC16 (the XMODEM variant: polynomial 0x1021, initial value 0, no
// reflection) of the key's hash tag, modulo SlotCount. The hash tag is
// the text between the first "{" and the first "}" after it, when that
// text is not empty; otherwise the whole key is hashed.
func Slot(key string) int {
	return int(crc16(hashTag(key))) % SlotCount
}

// Key returns the name of a data key of resource: "{resource}:name". Its
// hash tag is the resource name, the tag of the resource's mark, so the
// key is in the mark's hash slot and a fenced write may use it (see
// Guard.Exec). The resource name must not contain "{" or "}".
func Key(resource, name string) string {
	return "{" + resource + "}:" + name
}

// hashTag returns the part of key that Redis Cluster hashes.
func hashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return key
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 { // no "}", or "{}"
		return key
	}
	return key[open+1 : open+1+end]
}

// crc16 is CRC-16/XMODEM, computed bit by bit from its definition: each
// byte enters the top of the 16-bit register, which is shifted left once
// per bit and reduced by the polynomial when a 1 falls out of it.
func crc16(s string) uint16 {
	const poly = 0x1021
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ poly
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
