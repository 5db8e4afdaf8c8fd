/* The console's audit view: what `kosa8 audit verify` says of the log
 * (its verdict, exit status and the signed head it checked against) and
 * the newest records of `kosa8 audit show --json`.  Both are run as they
 * are, by this same kosa8 binary as a child, so the page shows exactly
 * what the command line does (the trusted key is found the same way). */
#ifndef KOSA8_UI_AUDIT_H
#define KOSA8_UI_AUDIT_H

#include <cjson/cJSON.h>

#define UI_AUDIT_RECORDS 300          /* the newest records shown */
#define UI_AUDIT_OUT_MAX (64 * 1024)  /* of verify's text kept */
#define UI_AUDIT_TIMEOUT_S 120

/* {"verify":{"status":0|1|2|-1,"text":..},"records":[...]} or NULL when
 * the children cannot run; -EBUSY (NULL, *err) while another view is
 * being made. */
cJSON *ui_audit_read(int *err);
/* {"records":[...]} without the verify: what the page reads when the
 * live state says the log changed (the egress timeline).  -EBUSY as
 * above, one at a time. */
cJSON *ui_audit_records(int *err);

#endif
