/*
 * stage.c - the input pipeline's hooks on a device row (see stage.h).
 */
#include "stage.h"

#include "data.h"

int stage_batch(void *link, batch *b) {
  stage_link *l = link;
  lowp_round(b->x, b->n * DATA_PIXELS, *l->lowp);
  return l->cp->ops->stage_put(l->cp, (int)(b - l->slots), b->x,
                               b->n * DATA_PIXELS * sizeof(float));
}

void stage_batch_done(void *link, const batch *b) {
  stage_link *l = link;
  l->cp->ops->stage_consumed(l->cp, (int)(b - l->slots));
}
