/*
 * outfile.c - creating the files hk writes (outfile.h).
 */
#include "common/outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/auth.h"
#include "common/status.h"

/* Only read and write bits: an output is never executable or setuid. */
#define FILE_BITS 0666u

unsigned hk_outdir_mode(unsigned file_mode) {
  file_mode &= FILE_BITS;
  return file_mode | 0700u | ((file_mode & 0040u) ? 0010u : 0) |
         ((file_mode & 0004u) ? 0001u : 0);
}

/* "dir/name" (or "name" without a folder) into out[cap]. */
static void join(char *out, size_t cap, const char *dir, const char *name) {
  if (dir && *dir)
    snprintf(out, cap, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/",
             name);
  else
    snprintf(out, cap, "%s", name);
}

static void reset(hk_outfile *f, const char *what) {
  memset(f, 0, sizeof *f);
  f->fd = f->dir_fd = -1;
  f->what = what;
}

/* A random name for f in its folder: ".NAME.<16 hex>.tmp" (NAME cut so
 * the whole fits in tmp). */
static hk_status random_name(hk_outfile *f) {
  unsigned char r[8];
  hk_status st = hk_random_bytes(r, sizeof r);
  if (st != HK_OK)
    return st;
  char hex[17];
  for (int i = 0; i < 8; i++)
    snprintf(hex + 2 * i, 3, "%02x", r[i]);
  snprintf(f->tmp, sizeof f->tmp, ".%.60s.%s.tmp", f->name, hex);
  return HK_OK;
}

/* Makes the file in f->dir_fd: unnamed, or under a random name. */
static hk_status make_file(hk_outfile *f, unsigned mode) {
  f->fd = openat(f->dir_fd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, mode);
  if (f->fd >= 0)
    return HK_OK;
  int e = errno;
  /* no O_TMPFILE here (the file system or an old kernel): a name only
   * this call can have made; anything else is the folder's fault */
  if (e != EOPNOTSUPP && e != EISDIR && e != EINVAL)
    return hk_fail_errno(HK_ERR_SYSTEM, e, "%s: cannot create '%s'", f->what,
                         f->path);
  for (int tries = 0; tries < 8; tries++) {
    hk_status st = random_name(f);
    if (st != HK_OK)
      return st;
    f->fd = openat(f->dir_fd, f->tmp,
                   O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (f->fd >= 0)
      return HK_OK;
    if (errno != EEXIST)
      break;
  }
  e = errno;
  f->tmp[0] = '\0';
  return hk_fail_errno(HK_ERR_SYSTEM, e, "%s: cannot create '%s'", f->what,
                       f->path);
}

hk_status hk_outfile_openat(hk_outfile *f, int dir_fd, const char *dir_path,
                            const char *name, unsigned mode, const char *what) {
  reset(f, what);
  join(f->path, sizeof f->path, dir_path, name);
  if (!*name || strchr(name, '/') || strlen(name) >= sizeof f->name)
    return hk_fail(HK_ERR_INVALID_ARG, "%s: '%s' is not a file name", what,
                   f->path);
  snprintf(f->name, sizeof f->name, "%s", name);
  f->dir_fd = fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
  if (f->dir_fd < 0)
    return hk_fail_errno(HK_ERR_SYSTEM, errno, "%s: cannot create '%s'", what,
                         f->path);
  hk_status st = make_file(f, mode & FILE_BITS);
  if (st != HK_OK)
    hk_outfile_close(f);
  return st;
}

hk_status hk_outfile_open(hk_outfile *f, const char *path, unsigned mode,
                          const char *what) {
  reset(f, what);
  const char *slash = strrchr(path, '/');
  const char *name = slash ? slash + 1 : path;
  char dir[4096];
  if (!slash)
    snprintf(dir, sizeof dir, ".");
  else if (slash == path)
    snprintf(dir, sizeof dir, "/");
  else
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    snprintf(f->path, sizeof f->path, "%s", path);
    return hk_fail_errno(HK_ERR_SYSTEM, errno,
                         "%s: cannot create '%s': its folder '%s'", what, path,
                         dir);
  }
  hk_status st = hk_outfile_openat(f, dfd, slash ? dir : "", name, mode, what);
  close(dfd);
  return st;
}

hk_status hk_outfile_write(hk_outfile *f, const void *data, size_t len) {
  const char *p = data;
  while (len > 0) {
    ssize_t w = write(f->fd, p, len);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return hk_fail_errno(HK_ERR_SYSTEM, w < 0 ? errno : ENOSPC,
                           "%s: cannot write '%s'", f->what, f->path);
    p += w;
    len -= (size_t)w;
  }
  return HK_OK;
}

/* Links the unnamed file under name (fails if the name is taken). */
static int link_unnamed(const hk_outfile *f, const char *name) {
  char proc[64];
  snprintf(proc, sizeof proc, "/proc/self/fd/%d", f->fd);
  return linkat(AT_FDCWD, proc, f->dir_fd, name, AT_SYMLINK_FOLLOW);
}

/* Puts the unnamed file under a random name (f->tmp). */
static hk_status link_random(hk_outfile *f) {
  for (int tries = 0; tries < 8; tries++) {
    hk_status st = random_name(f);
    if (st != HK_OK)
      return st;
    if (link_unnamed(f, f->tmp) == 0)
      return HK_OK;
    int e = errno;
    f->tmp[0] = '\0';
    if (e != EEXIST)
      return hk_fail_errno(HK_ERR_SYSTEM, e, "%s: cannot create '%s'", f->what,
                           f->path);
  }
  return hk_fail(HK_ERR_SYSTEM, "%s: cannot create '%s': no free name", f->what,
                 f->path);
}

hk_status hk_outfile_publish(hk_outfile *f, hk_out_replace how) {
  if (f->published)
    return HK_OK;
  if (!f->tmp[0]) {                      /* unnamed */
    if (link_unnamed(f, f->name) == 0) { /* the name was free */
      f->published = 1;
      return HK_OK;
    }
    int e = errno;
    if (e == EEXIST && how == HK_OUT_UNLINK_FIRST) {
      /* whatever has the name goes (a link itself, not its target);
       * linkat never replaces, so a link placed in between fails it */
      if (unlinkat(f->dir_fd, f->name, 0) != 0 && errno != ENOENT)
        e = errno;
      else if (link_unnamed(f, f->name) == 0)
        e = 0;
      else
        e = errno;
      if (!e) {
        f->published = 1;
        return HK_OK;
      }
    }
    if (e != EEXIST || how == HK_OUT_UNLINK_FIRST)
      return hk_fail_errno(HK_ERR_SYSTEM, e, "%s: cannot replace '%s'", f->what,
                           f->path);
    hk_status st = link_random(f); /* HK_OUT_ATOMIC: then renamed over */
    if (st != HK_OK)
      return st;
  }
  if (renameat(f->dir_fd, f->tmp, f->dir_fd, f->name) != 0)
    return hk_fail_errno(HK_ERR_SYSTEM, errno, "%s: cannot replace '%s'",
                         f->what, f->path);
  f->tmp[0] = '\0';
  f->published = 1;
  return HK_OK;
}

void hk_outfile_close(hk_outfile *f) {
  if (!f)
    return;
  if (f->fd >= 0)
    close(f->fd);
  if (f->tmp[0] && f->dir_fd >= 0)
    unlinkat(f->dir_fd, f->tmp, 0);
  if (f->dir_fd >= 0)
    close(f->dir_fd);
  f->fd = f->dir_fd = -1;
  f->tmp[0] = '\0';
}

hk_status hk_outfile_replace(const char *path, unsigned mode, const void *text,
                             size_t len, hk_out_replace how, const char *what) {
  hk_outfile f;
  hk_status st = hk_outfile_open(&f, path, mode, what);
  if (st == HK_OK)
    st = hk_outfile_write(&f, text, len);
  if (st == HK_OK)
    st = hk_outfile_publish(&f, how);
  hk_outfile_close(&f);
  return st;
}

hk_status hk_outdir_make(int parent_fd, const char *parent_path,
                         const char *name, unsigned mode, int own,
                         const char *what, int *out_fd) {
  char path[4352];
  join(path, sizeof path, parent_path, name);
  *out_fd = -1;
  if (mkdirat(parent_fd, name, hk_outdir_mode(mode)) != 0 && errno != EEXIST)
    return hk_fail_errno(HK_ERR_SYSTEM, errno,
                         "%s: cannot make the folder '%s'", what, path);
  int fd = openat(parent_fd, name,
                  O_RDONLY | O_DIRECTORY | O_CLOEXEC | (own ? O_NOFOLLOW : 0));
  if (fd < 0) {
    int e = errno;
    if (own && (e == ELOOP || e == ENOTDIR))
      return hk_fail(HK_ERR_SYSTEM,
                     "%s: '%s' is not a folder hk made (a link or a file is "
                     "there): refusing to write into it",
                     what, path);
    return hk_fail_errno(HK_ERR_SYSTEM, e, "%s: cannot open the folder '%s'",
                         what, path);
  }
  struct stat sb;
  if (own && fstat(fd, &sb) != 0) {
    int e = errno;
    close(fd);
    return hk_fail_errno(HK_ERR_SYSTEM, e, "%s: cannot open the folder '%s'",
                         what, path);
  }
  if (own && sb.st_uid != geteuid()) {
    close(fd);
    return hk_fail(HK_ERR_SYSTEM,
                   "%s: the folder '%s' belongs to user %ld, not to this "
                   "process's user %ld: refusing to write into it",
                   what, path, (long)sb.st_uid, (long)geteuid());
  }
  *out_fd = fd;
  return HK_OK;
}
