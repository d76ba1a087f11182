package redisguard

// FenceScript is the fenced script's text, for the benchmark's arm that
// measures its cost without the server-life check.
const FenceScript = fenceScript
