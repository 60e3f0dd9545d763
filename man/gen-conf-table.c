/*
 * gen-conf-table: writes umpool(7) from man/umpool.7.in, replacing the
 * line "@CONF_TABLE@" with one .TP entry per key of the configuration
 * table (conf_table in lib/util/conf.c, the one source of truth), and
 * "@VERSION@" and "@TOPOLOGY_DIR@" wherever they appear.
 *
 *     gen-conf-table TEMPLATE > umpool.7    the whole page
 *     gen-conf-table > rows                 the table's entries only
 *
 * Built and run at build time (man/local.mk); it links the internal
 * convenience library to read the table as the library itself does.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "umpool.h"

#ifndef UMP_TOPOLOGY_DIR
#define UMP_TOPOLOGY_DIR "/usr/local/share/umpool/topologies"
#endif

/* Text for roff, also inside a quoted macro argument: a backslash is \e,
 * a double quote \(dq, and a leading '.' or '\'' is protected so that it
 * is not read as a request. */
static void put_roff(FILE *out, const char *s)
{
    if (*s == '.' || *s == '\'')
        fputs("\\&", out);
    for (; *s; s++) {
        if (*s == '\\')
            fputs("\\e", out);
        else if (*s == '"')
            fputs("\\(dq", out);
        else
            fputc(*s, out);
    }
}

static const char *type_name(enum ump_conf_type t)
{
    switch (t) {
    case UMP_CONF_ENUM:
        return "enum";
    case UMP_CONF_INT:
        return "integer";
    case UMP_CONF_SIZE:
        return "size";
    case UMP_CONF_STRING:
        return "string";
    case UMP_CONF_BOOL:
        return "boolean";
    case UMP_CONF_LIST:
        return "list";
    }
    return "?";
}

/* One entry per key:
 *   .TP
 *   .BR key " (type, default: " value )
 *   doc.
 *   Accepted: accepted.
 */
static int put_rows(FILE *out)
{
    size_t n = 0;
    for (const struct ump_conf_entry *e = conf_table; e->key; e++, n++) {
        fputs(".TP\n.BR ", out);
        put_roff(out, e->key);
        fprintf(out, " \" (%s, default: \" ", type_name(e->type));
        if (*e->dflt) {
            fputc('"', out);
            put_roff(out, e->dflt);
            fputs("\" )\n", out);
        } else {
            fputs("\"\" \"empty)\"\n", out);
        }
        /* The table's docs are log-style lowercase; a sentence here. */
        if (*e->doc >= 'a' && *e->doc <= 'z') {
            fputc(*e->doc - 'a' + 'A', out);
            put_roff(out, e->doc + 1);
        } else {
            put_roff(out, e->doc);
        }
        fputs(".\n", out);
        if (e->accepted && *e->accepted) {
            fputs("Accepted: ", out);
            put_roff(out, e->accepted);
            fputs(".\n", out);
        }
    }
    if (!n) {
        fputs("gen-conf-table: the configuration table is empty\n", stderr);
        return 1;
    }
    return 0;
}

/* Copies line to out with @VERSION@ and @TOPOLOGY_DIR@ replaced. */
static void put_line(FILE *out, const char *line)
{
    for (const char *p = line; *p;) {
        if (!strncmp(p, "@VERSION@", 9)) {
            fputs(ump_version_string(), out);
            p += 9;
        } else if (!strncmp(p, "@TOPOLOGY_DIR@", 14)) {
            put_roff(out, UMP_TOPOLOGY_DIR);
            p += 14;
        } else {
            fputc(*p++, out);
        }
    }
}

int main(int argc, char **argv)
{
    if (argc > 2) {
        fputs("usage: gen-conf-table [TEMPLATE]\n", stderr);
        return 2;
    }
    if (argc == 1)
        return put_rows(stdout) || fflush(stdout) != 0;

    FILE *in = fopen(argv[1], "r");
    if (!in) {
        perror(argv[1]);
        return 1;
    }
    char line[4096];
    int rc = 0, tables = 0;
    while (!rc && fgets(line, sizeof(line), in)) {
        if (!strcmp(line, "@CONF_TABLE@\n")) {
            rc = put_rows(stdout);
            tables++;
        } else {
            put_line(stdout, line);
        }
    }
    if (ferror(in)) {
        perror(argv[1]);
        rc = 1;
    }
    fclose(in);
    if (!rc && tables != 1) {
        fprintf(stderr, "gen-conf-table: %s: expected one line "
                "\"@CONF_TABLE@\", found %d\n", argv[1], tables);
        rc = 1;
    }
    if (fflush(stdout) != 0) {
        perror("gen-conf-table: stdout");
        rc = 1;
    }
    return rc;
}
