/* Runs files through a fuzz target's LLVMFuzzerTestOneInput without libFuzzer, so that make test
   replays every seed and every saved finding with the ordinary compiler (and make sanitize under
   ASan + UBSan). A target's own checks abort on a wrong answer; this only feeds it.
     build/fuzz_replay_json tests/fuzz/corpus_json [more folders or files]
   A folder that does not exist is skipped (a target may have no findings yet). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    uint8_t *buf;
    long n;
    if (!f) return 0;
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return 0;
    }
    buf = (uint8_t *)malloc((size_t)n + 1); /* + 1: an empty input still gets a valid pointer */
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "replay: cannot read %s\n", path);
        exit(1);
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, (size_t)n);
    free(buf);
    return 1;
}

int main(int argc, char **argv) {
    int i, count = 0;
    for (i = 1; i < argc; i++) {
        struct stat sb;
        DIR *d;
        struct dirent *e;
        if (stat(argv[i], &sb) != 0) continue;
        if (!S_ISDIR(sb.st_mode)) {
            count += replay_file(argv[i]);
            continue;
        }
        if (!(d = opendir(argv[i]))) continue;
        while ((e = readdir(d)) != NULL) {
            char p[4096];
            if (e->d_name[0] == '.') continue;
            snprintf(p, sizeof p, "%s/%s", argv[i], e->d_name);
            if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode)) count += replay_file(p);
        }
        closedir(d);
    }
    printf("%s: %d inputs replayed\n", argv[0], count);
    return 0;
}
