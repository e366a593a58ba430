// Everything a user of hmcast needs.
#pragma once

#include "hmcast/config.hpp"
#include "hmcast/error.hpp"
#include "hmcast/node.hpp"
#include "hmcast/types.hpp"
