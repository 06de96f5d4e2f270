/*
 * test_outfile.c - the one way hk makes its output files
 * (common/outfile.h): a link at the name is replaced, never written
 * through; nothing has the name until the file is published, and one
 * never published leaves nothing; a replacement keeps the old file until
 * the new one is whole; the mode is the caller's (less the umask); a
 * folder hk keeps its own files in must be a folder of this user, not a
 * link; errors name the setting, the file and the reason.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/outfile.h"
#include "common/status.h"

/* A fresh folder under $TMPDIR. */
static void make_dir(char *out, size_t cap) {
  const char *t = getenv("TMPDIR");
  snprintf(out, cap, "%s/hk-outfile-test.XXXXXX", t && *t == '/' ? t : "/tmp");
  assert_non_null(mkdtemp(out));
}

/* Removes the folder and the plain files and links in it. */
static void remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  for (struct dirent *e; (e = readdir(d));) {
    char p[4400];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
      assert_int_equal(e->d_type == DT_DIR ? rmdir(p) : unlink(p), 0);
  }
  closedir(d);
  assert_int_equal(rmdir(dir), 0);
}

/* The names in dir (not . and ..), sorted, joined by ' '. */
static void names(const char *dir, char *out, size_t cap) {
  struct dirent **list;
  int n = scandir(dir, &list, NULL, alphasort);
  assert_true(n >= 0);
  out[0] = '\0';
  for (int i = 0; i < n; i++) {
    if (strcmp(list[i]->d_name, ".") && strcmp(list[i]->d_name, ".."))
      snprintf(out + strlen(out), cap - strlen(out), "%s%s", out[0] ? " " : "",
               list[i]->d_name);
    free(list[i]);
  }
  free(list);
}

static void read_text(const char *path, char *out, size_t cap) {
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  size_t n = fread(out, 1, cap - 1, f);
  out[n] = '\0';
  fclose(f);
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

/* A link at the name (to a file of someone else's, a root job's target)
 * is replaced by the file, not written through, whichever way it is
 * replaced. */
static void test_link_at_name_replaced(void **s) {
  (void)s;
  char dir[4096], victim[4200], path[4200], text[64];
  make_dir(dir, sizeof dir);
  snprintf(victim, sizeof victim, "%s/victim", dir);
  snprintf(path, sizeof path, "%s/out.txt", dir);
  write_text(victim, "precious\n");
  for (int how = HK_OUT_ATOMIC; how <= HK_OUT_UNLINK_FIRST; how++) {
    assert_int_equal(symlink(victim, path), 0);
    assert_int_equal(
        hk_outfile_replace(path, 0600, "new\n", 4, (hk_out_replace)how, "TEST"),
        HK_OK);
    read_text(victim, text, sizeof text);
    assert_string_equal(text, "precious\n");
    struct stat sb;
    assert_int_equal(lstat(path, &sb), 0);
    assert_true(S_ISREG(sb.st_mode));
    read_text(path, text, sizeof text);
    assert_string_equal(text, "new\n");
    assert_int_equal(unlink(path), 0);
  }
  char left[256];
  names(dir, left, sizeof left);
  assert_string_equal(left, "victim");
  remove_dir(dir);
}

/* Nothing has the name before the publish; the old file stays whole
 * until then; a file never published leaves nothing. */
static void test_whole_before_named(void **s) {
  (void)s;
  char dir[4096], path[4200], text[64], left[256];
  make_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/m.prom", dir);
  hk_outfile f;
  assert_int_equal(hk_outfile_open(&f, path, 0600, "TEST"), HK_OK);
  assert_int_equal(hk_outfile_write(&f, "half", 4), HK_OK);
  names(dir, left, sizeof left);
  assert_string_equal(left, ""); /* unnamed while it is written */
  hk_outfile_close(&f);          /* never published: gone */
  names(dir, left, sizeof left);
  assert_string_equal(left, "");
  write_text(path, "old\n");
  assert_int_equal(hk_outfile_open(&f, path, 0600, "TEST"), HK_OK);
  assert_int_equal(hk_outfile_write(&f, "new ", 4), HK_OK);
  read_text(path, text, sizeof text);
  assert_string_equal(text, "old\n");
  assert_int_equal(hk_outfile_write(&f, "whole\n", 6), HK_OK);
  assert_int_equal(hk_outfile_publish(&f, HK_OUT_ATOMIC), HK_OK);
  read_text(path, text, sizeof text);
  assert_string_equal(text, "new whole\n");
  /* still open for more: a file that grows (the timeline) */
  assert_int_equal(hk_outfile_write(&f, "more\n", 5), HK_OK);
  hk_outfile_close(&f);
  read_text(path, text, sizeof text);
  assert_string_equal(text, "new whole\nmore\n");
  names(dir, left, sizeof left);
  assert_string_equal(left, "m.prom"); /* no temporary beside it */
  remove_dir(dir);
}

/* The mode is the caller's, less the umask. */
static void test_modes(void **s) {
  (void)s;
  char dir[4096], path[4200];
  make_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/f", dir);
  mode_t old = umask(022);
  static const unsigned modes[][2] = {
      {0600, 0600}, {0644, 0644}, {0666, 0644}, {0640, 0640}};
  for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
    assert_int_equal(
        hk_outfile_replace(path, modes[i][0], "x", 1, HK_OUT_ATOMIC, "TEST"),
        HK_OK);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 07777, modes[i][1]);
  }
  umask(old);
  assert_int_equal(hk_outdir_mode(0600), 0700);
  assert_int_equal(hk_outdir_mode(0644), 0755);
  assert_int_equal(hk_outdir_mode(0640), 0750);
  remove_dir(dir);
}

/* A folder for hk's own files: made 0700, reused when it is this user's;
 * a link there, or a folder of another user, is refused with its name. */
static void test_own_folder(void **s) {
  (void)s;
  char dir[4096], sub[4200], other[4200];
  make_dir(dir, sizeof dir);
  int base = open(dir, O_RDONLY | O_DIRECTORY);
  assert_true(base >= 0);
  int fd = -1;
  mode_t old = umask(022);
  assert_int_equal(hk_outdir_make(base, dir, "job", 0600, 1, "TEST", &fd),
                   HK_OK);
  umask(old);
  snprintf(sub, sizeof sub, "%s/job", dir);
  struct stat sb;
  assert_int_equal(lstat(sub, &sb), 0);
  assert_int_equal(sb.st_mode & 07777, 0700);
  close(fd);
  assert_int_equal(hk_outdir_make(base, dir, "job", 0600, 1, "TEST", &fd),
                   HK_OK); /* again: ours */
  close(fd);
  snprintf(other, sizeof other, "%s/link", dir);
  assert_int_equal(symlink(sub, other), 0);
  assert_int_equal(hk_outdir_make(base, dir, "link", 0600, 1, "TEST", &fd),
                   HK_ERR_SYSTEM);
  assert_int_equal(fd, -1);
  char want[4400];
  snprintf(want, sizeof want,
           "TEST: '%s' is not a folder hk made (a link or a file is there): "
           "refusing to write into it",
           other);
  assert_string_equal(hk_last_error(), want);
  /* the user's own folder (own = 0): a link is theirs to follow */
  assert_int_equal(hk_outdir_make(base, dir, "link", 0600, 0, "TEST", &fd),
                   HK_OK);
  close(fd);
  if (geteuid() == 0) { /* only root can give a folder away */
    assert_int_equal(chown(sub, 4242, 4242), 0);
    assert_int_equal(hk_outdir_make(base, dir, "job", 0600, 1, "TEST", &fd),
                     HK_ERR_SYSTEM);
    assert_non_null(strstr(hk_last_error(),
                           "belongs to user 4242, not to this process's user "
                           "0: refusing to write into it"));
  }
  close(base);
  remove_dir(dir);
}

/* Errors name the setting, the file and the system's reason. */
static void test_errors_name_the_file(void **s) {
  (void)s;
  char dir[4096], path[4300], want[9000];
  make_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/no/t.json", dir);
  hk_outfile f;
  assert_int_equal(hk_outfile_open(&f, path, 0600, "HK_TIMELINE"),
                   HK_ERR_SYSTEM);
  snprintf(want, sizeof want,
           "HK_TIMELINE: cannot create '%s': its folder '%s/no': No such "
           "file or directory",
           path, dir);
  assert_string_equal(hk_last_error(), want);
  hk_outfile_close(&f); /* closed already: nothing */
  /* a folder at the name: the publish says it cannot replace it */
  snprintf(path, sizeof path, "%s/d", dir);
  assert_int_equal(mkdir(path, 0700), 0);
  for (int how = HK_OUT_ATOMIC; how <= HK_OUT_UNLINK_FIRST; how++) {
    assert_int_equal(
        hk_outfile_replace(path, 0600, "x", 1, (hk_out_replace)how, "TEST"),
        HK_ERR_SYSTEM);
    snprintf(want, sizeof want, "TEST: cannot replace '%s': ", path);
    assert_non_null(strstr(hk_last_error(), want));
  }
  char left[256];
  names(dir, left, sizeof left);
  assert_string_equal(left, "d"); /* nothing else left */
  remove_dir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_link_at_name_replaced),
      cmocka_unit_test(test_whole_before_named),
      cmocka_unit_test(test_modes),
      cmocka_unit_test(test_own_folder),
      cmocka_unit_test(test_errors_name_the_file),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
