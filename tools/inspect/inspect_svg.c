/*
 * The memory map picture: each device is a ribbon wrapped over a few rows,
 * its map entries laid end to end in address order, each as long as the
 * memory it stands for (at least one pixel, so that nothing in use
 * vanishes). One <g> per device holds one <g> per state, so that a style
 * sheet or a script can pick a state out.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>

#include "inspect_fmt.h"

#define WIDTH 768   /* px of one row of a ribbon */
#define ROWS 4
#define ROW_H 14
#define ROW_GAP 4
#define MARGIN 20
#define LABEL 22    /* the line above a ribbon */
#define DEV_GAP 14  /* between devices */
#define RIBBON ((uint64_t)WIDTH * ROWS)
#define DEV_H (LABEL + ROWS * (ROW_H + ROW_GAP) + DEV_GAP)

static const char *const state_color[SNAP_NSTATES] = {
    "#2563eb", /* used: blue */
    "#f59e0b", /* cached: amber */
    "#e5e7eb", /* free: light grey */
    "#8b5cf6", /* on host: violet */
    "#92400e", /* on NVMe: brown */
};
static const char *const state_label[SNAP_NSTATES] = {
    "used", "cached", "free", "on host", "on NVMe"};

static void xml_text(FILE *out, const char *s)
{
    for (; *s; s++)
        switch (*s) {
        case '&': fputs("&amp;", out); break;
        case '<': fputs("&lt;", out); break;
        case '>': fputs("&gt;", out); break;
        case '"': fputs("&quot;", out); break;
        default: fputc(*s, out);
        }
}

static uint64_t device_units(const struct snap_view *v, uint32_t d)
{
    const struct snap_map *m = v->map + (size_t)d * v->hdr->map_cap;
    uint64_t units = 0;
    for (uint32_t i = 0; i < v->dev[d].map_count; i++)
        units += m[i].units;
    return units;
}

/* Pixels [p0, p1) of the ribbon, row by row. */
static void span(FILE *out, uint64_t p0, uint64_t p1)
{
    while (p0 < p1) {
        uint64_t row = p0 / WIDTH, x = p0 % WIDTH;
        uint64_t w = p1 - p0 < WIDTH - x ? p1 - p0 : WIDTH - x;
        fprintf(out, "      <rect x=\"%" PRIu64 "\" y=\"%" PRIu64
                "\" width=\"%" PRIu64 "\" height=\"%d\"/>\n", x,
                row * (ROW_H + ROW_GAP), w, ROW_H);
        p0 += w;
    }
}

/* Each entry's pixels: its share of the ribbon, rounded down, and at least
 * one (taken from the widest entries) while there are pixels enough; what
 * rounding left over goes to the widest. */
static void widths(const struct snap_map *m, uint32_t n, uint64_t total,
                   uint64_t *w)
{
    uint64_t sum = 0;
    for (uint32_t i = 0; i < n; i++) {
        w[i] = m[i].units * RIBBON / total;
        sum += w[i];
    }
    for (uint32_t i = 0; i < n && n <= RIBBON; i++) {
        if (w[i])
            continue;
        w[i] = 1;
        if (sum++ < RIBBON)
            continue;
        uint32_t widest = 0; /* over budget: the widest gives one back */
        for (uint32_t k = 1; k < n; k++)
            if (w[k] > w[widest])
                widest = k;
        w[widest]--;
        sum--;
    }
    uint32_t widest = 0;
    for (uint32_t k = 1; k < n; k++)
        if (w[k] > w[widest])
            widest = k;
    if (n && sum < RIBBON)
        w[widest] += RIBBON - sum;
}

/* px as bytes, at least 1: converting a double at or above 2^64 to
 * uint64_t is undefined (map units as large as UINT64_MAX get there). */
static uint64_t px_bytes(double px)
{
    if (!(px >= 1))
        return 1;
    return px >= 0x1p64 ? UINT64_MAX : (uint64_t)px;
}

static void device(FILE *out, const struct snap_view *v, uint32_t d,
                   uint64_t y)
{
    const struct snap_device *x = &v->dev[d];
    const struct snap_map *m = v->map + (size_t)d * v->hdr->map_cap;
    char s[3][FMT_SIZE_LEN];
    uint64_t total = device_units(v, d);
    fprintf(out, "  <g class=\"device\" id=\"device-%" PRIu32 "\" "
            "transform=\"translate(%d,%" PRIu64 ")\">\n    <text x=\"0\" "
            "y=\"14\">device %" PRIu32 ": ", d, MARGIN, y, d);
    xml_text(out, x->model[0] ? x->model : "-");
    fprintf(out, ", %s", fmt_size(s[0], x->capacity));
    const char *sep = ": ";
    for (unsigned st = 0; st < SNAP_NSTATES; st++)
        if (x->state_bytes[st] && st != SNAP_FREE) {
            fprintf(out, "%s%s %s", sep, state_label[st],
                    fmt_size(s[1], x->state_bytes[st]));
            sep = ", ";
        }
    /* A pixel's worth, for people reading the picture. */
    double px = (double)total * (double)x->map_unit / (double)RIBBON;
    fprintf(out, "; 1 px = %s</text>\n", fmt_size(s[2], px_bytes(px)));
    fprintf(out, "    <g transform=\"translate(0,%d)\">\n", LABEL);
    uint64_t w[SNAP_MAX_MAP];
    if (total)
        widths(m, x->map_count, total, w);
    for (unsigned st = 0; st < SNAP_NSTATES; st++) {
        fprintf(out, "    <g class=\"state\" data-state=\"%s\" fill=\"%s\">\n",
                snap_state_name(st), state_color[st]);
        uint64_t at = 0;
        for (uint32_t i = 0; i < x->map_count && total; i++) {
            if (m[i].state == st)
                span(out, at, at + w[i]);
            at += w[i];
        }
        fprintf(out, "    </g>\n");
    }
    for (int r = 0; r < ROWS; r++)
        fprintf(out, "    <rect class=\"frame\" y=\"%d\" width=\"%d\" "
                "height=\"%d\" fill=\"none\" stroke=\"#9ca3af\"/>\n",
                r * (ROW_H + ROW_GAP), WIDTH, ROW_H);
    fprintf(out, "    </g>\n  </g>\n");
}

void fmt_svg(FILE *out, const struct snap_view *v)
{
    const struct snap_header *h = v->hdr;
    uint64_t totals[SNAP_NSTATES] = {0};
    for (uint32_t d = 0; d < h->ndev; d++)
        for (unsigned s = 0; s < SNAP_NSTATES; s++)
            totals[s] += v->dev[d].state_bytes[s];
    uint64_t height = 70 + (uint64_t)h->ndev * DEV_H;
    unsigned width = 2 * MARGIN + WIDTH;
    fprintf(out, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%u\" "
            "height=\"%" PRIu64 "\" viewBox=\"0 0 %u %" PRIu64 "\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n", width, height,
            width, height);
    fprintf(out, "  <title>umpool: memory map of pool %" PRIu64 " of pid %"
            PRId32 " (", h->pool_id, h->pid);
    xml_text(out, h->program);
    fprintf(out, ")</title>\n  <rect width=\"100%%\" height=\"100%%\" "
            "fill=\"#ffffff\"/>\n");
    fprintf(out, "  <text x=\"%d\" y=\"24\" font-size=\"15\" "
            "font-weight=\"bold\">pool %" PRIu64 " of pid %" PRId32 " (",
            MARGIN, h->pool_id, h->pid);
    xml_text(out, h->program);
    fprintf(out, "): backend ");
    xml_text(out, h->backend);
    fprintf(out, ", topology ");
    xml_text(out, h->topology[0] ? h->topology : "-");
    fprintf(out, ", snapshot %" PRIu64 "</text>\n  <g id=\"legend\" "
            "transform=\"translate(%d,38)\">\n", v->data->generation, MARGIN);
    for (unsigned s = 0; s < SNAP_NSTATES; s++) {
        char b[FMT_SIZE_LEN];
        unsigned x = s * 150;
        fprintf(out, "    <rect x=\"%u\" y=\"0\" width=\"12\" height=\"12\" "
                "fill=\"%s\" stroke=\"#6b7280\"/>\n    <text x=\"%u\" "
                "y=\"11\">%s %s</text>\n", x, state_color[s], x + 17,
                state_label[s], fmt_size(b, totals[s]));
    }
    fprintf(out, "  </g>\n");
    uint64_t y = 70;
    for (uint32_t d = 0; d < h->ndev; d++) {
        device(out, v, d, y);
        y += DEV_H;
    }
    fprintf(out, "</svg>\n");
}
