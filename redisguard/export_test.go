package redisguard

// InfoEachWrite is the fenced function as an EVAL script that reads the
// server's run_id with INFO server on every call instead of once per Lua
// virtual machine: the benchmark's arm that prices what the kept run_id
// saves.
const InfoEachWrite = olderLua + "local function server_life()" + lifeLua + "end\n" + fenceBody

// LibraryName is the name of the function library the package loads.
var LibraryName = lib.name
