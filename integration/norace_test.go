//go:build unix && !race

package integration

// raceDetector reports whether the test binary was built with -race.
const raceDetector = false
