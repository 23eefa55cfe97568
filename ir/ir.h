/* ir.h — the contract of ir/: documents (YAML/JSON with positions), the model zoo and its cost
 * model, clusters, programs, and the global training DAG. Other modules include this header only. */
#ifndef PIPER_IR_H
#define PIPER_IR_H

#include "cluster.h"
#include "dag.h"
#include "doc.h"
#include "model.h"
#include "program.h"

#endif
