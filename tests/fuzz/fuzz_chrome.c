/* fuzz_chrome.c — libFuzzer entry for piper-viz's Chrome-trace reader (viz/chrome_read.c): any
 * bytes go through viz_chrome_read; a failed read names the file, a trace that reads has every
 * event on a lane it lists, in time order within the lane. Broken promises abort. Seeds:
 * tests/fuzz/corpus/chrome. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "viz/viz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void require(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_chrome: broken promise: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    viz_chrome t;
    base_error e;
    base_error_clear(&e);
    int rc = viz_chrome_read(&t, "fuzz.json", (const char *)data, size, &e);
    require(rc == 0 || rc == -1, "status is 0 or -1");
    if (rc) {
        require(e.set && strncmp(e.msg, "fuzz.json", 9) == 0, "a read error names the file");
        require(t.nevents == 0 && t.nlanes == 0, "a failed read leaves the trace empty");
    } else {
        for (int i = 0; i < t.nevents; i++) {
            require(t.events[i].lane >= 0 && t.events[i].lane < t.nlanes, "every event is on a listed lane");
            require(i == 0 || t.events[i - 1].lane <= t.events[i].lane, "events are grouped by lane");
        }
    }
    viz_chrome_free(&t);
    return 0;
}
